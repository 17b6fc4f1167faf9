import TermindCore

extension PortKey where P == Database {
    /// The process database, provided by the kernel to features that list it.
    public static var store: Self { PortKey("kernel.store") }
}

extension PortKey where P == SecretStore {
    /// The encrypted secret store, provided by the kernel to features that list it.
    public static var secrets: Self { PortKey("kernel.secrets") }
}

/// Ports the kernel itself provides (never a feature): the process database, the secret
/// store, and the process's shared SSH connections (`kernel.ssh`, an `SSHConnectionPool`).
public enum KernelPorts {
    public static let all: Set<String> = ["kernel.store", "kernel.secrets", "kernel.ssh"]
}
