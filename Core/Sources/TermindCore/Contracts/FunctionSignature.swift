/// A C function signature declared in a plugin manifest, e.g. `uint32(string, uint64)`.
/// Parsed here (pure); bound and called through libffi by the kernel. A function without
/// parameters is written `int32()` or, as in C, `int32(void)`.
public struct FunctionSignature: Sendable, Equatable {
    public enum CType: String, Sendable, CaseIterable {
        case void, int32, uint32, int64, uint64, double, bool, string
    }

    public let returns: CType
    public let parameters: [CType]

    /// Upper bound on parameters; keeps argument marshalling allocation-bounded.
    public static let maximumParameters = 16

    public static func parse(_ text: String) -> Result<FunctionSignature, TermindError> {
        let compact = text.filter { !$0.isWhitespace }
        guard let open = compact.firstIndex(of: "("), compact.last == ")" else {
            return .failure(.init(.signatureMalformed, "signature '\(text)' must look like 'uint32(string, uint64)'"))
        }
        let returnName = String(compact[..<open])
        guard let returns = CType(rawValue: returnName) else {
            return .failure(.init(.signatureType, "signature '\(text)': return type '\(returnName)' is not one of \(CType.allCases.map(\.rawValue).joined(separator: ", "))"))
        }
        let inner = compact[compact.index(after: open)..<compact.index(before: compact.endIndex)]
        var parameters: [CType] = []
        // `void(void)`, as C writes a function without parameters, is `void()`.
        if !inner.isEmpty && inner != "void" {
            for name in inner.split(separator: ",", omittingEmptySubsequences: false) {
                guard let type = CType(rawValue: String(name)), type != .void else {
                    return .failure(.init(.signatureType, "signature '\(text)': parameter type '\(name)' is not one of \(CType.allCases.filter { $0 != .void }.map(\.rawValue).joined(separator: ", "))"))
                }
                parameters.append(type)
            }
        }
        guard parameters.count <= maximumParameters else {
            return .failure(.init(.signatureArity, "signature '\(text)' has \(parameters.count) parameters; at most \(maximumParameters) are supported"))
        }
        return .success(FunctionSignature(returns: returns, parameters: parameters))
    }
}
