/// VaultRules: the Vault's pure rules — OpenSSH known_hosts matching, the ssh_config and
/// quick-connect grammars, optional-name defaults and route checks. No I/O: callers pass
/// text in and get values and errors out, so tests drive these directly.
public enum VaultRules {}
