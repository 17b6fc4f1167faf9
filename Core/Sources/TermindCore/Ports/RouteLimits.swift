/// How long a route (jump hosts, then the target) may be: the Vault's host records,
/// quick-connect lines and the SSH transport all hold to this one bound.
public enum RouteLimits {
    /// Hosts in a route, the target included.
    public static let maxHosts = 8
}
