import CFFI
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// A C function a plugin declared in its manifest, bound at run time through libffi from
/// its textual signature. Arguments arrive as JSON and are checked against the signature
/// before the call; strings are copied in (NUL-terminated) and a returned `const char *`
/// is borrowed and copied out (NULL becomes JSON null). Integers keep their full 64-bit
/// range both ways; a result JSON cannot carry (inf, NaN, a string that is not UTF-8 or
/// larger than the reply bound) is an error naming the function. Calls run on the
/// plugin's executor, never on the Swift cooperative pool, since C may block.
///
/// `@unchecked Sendable`: every stored property is a `let`; the `cif` and `argumentTypes`
/// buffers are filled in init and only read afterwards (ffi_call does not change them), and each
/// `call` uses buffers of its own.
final class ForeignFunction: @unchecked Sendable {
    let name: String
    let plugin: String
    let signature: FunctionSignature
    private let symbol: UnsafeMutableRawPointer
    private let cif: UnsafeMutablePointer<ffi_cif>
    private let argumentTypes: UnsafeMutablePointer<UnsafeMutablePointer<ffi_type>?>

    init(name: String, plugin: String, signature: FunctionSignature, symbol: UnsafeMutableRawPointer) throws {
        self.name = name
        self.plugin = plugin
        self.signature = signature
        self.symbol = symbol
        cif = .allocate(capacity: 1)
        argumentTypes = .allocate(capacity: max(signature.parameters.count, 1))
        for (index, type) in signature.parameters.enumerated() {
            argumentTypes[index] = Self.ffiType(type)
        }
        let status = ffi_prep_cif(cif, termind_ffi_default_abi(), UInt32(signature.parameters.count),
                                  Self.ffiType(signature.returns), argumentTypes)
        guard status == FFI_OK else {
            cif.deallocate()
            argumentTypes.deallocate()
            throw TermindError(.pluginFunctionBind, "function '\(name)': libffi could not prepare its signature (status \(status.rawValue)).")
        }
    }

    deinit {
        cif.deallocate()
        argumentTypes.deallocate()
    }

    private static func ffiType(_ type: FunctionSignature.CType) -> UnsafeMutablePointer<ffi_type> {
        switch type {
        case .void: termind_ffi_void()
        case .int32: termind_ffi_sint32()
        case .uint32: termind_ffi_uint32()
        case .int64: termind_ffi_sint64()
        case .uint64: termind_ffi_uint64()
        case .double: termind_ffi_double()
        case .bool: termind_ffi_uint8()
        case .string: termind_ffi_pointer()
        }
    }

    /// Calls the function with JSON arguments; every mismatch is reported by position.
    func call(_ arguments: [JSONValue]) throws -> JSONValue {
        guard arguments.count == signature.parameters.count else {
            throw TermindError.badRequest("function '\(name)' takes \(signature.parameters.count) argument\(signature.parameters.count == 1 ? "" : "s"), got \(arguments.count).")
        }
        let slots = UnsafeMutableRawPointer.allocate(byteCount: max(arguments.count, 1) * 8, alignment: 8)
        let values = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: max(arguments.count, 1))
        var strings: [UnsafeMutablePointer<CChar>] = []
        defer {
            strings.forEach { free($0) }
            slots.deallocate()
            values.deallocate()
        }
        for (index, (type, value)) in zip(signature.parameters, arguments).enumerated() {
            let slot = slots + index * 8
            values[index] = slot
            let position = "function '\(name)' argument \(index + 1)"
            switch (type, value) {
            case (.int32, .integer(let v)):
                guard let x = Int32(exactly: v) else { throw TermindError.badRequest("\(position): \(v) does not fit int32.") }
                slot.storeBytes(of: x, as: Int32.self)
            case (.uint32, .integer(let v)):
                guard let x = UInt32(exactly: v) else { throw TermindError.badRequest("\(position): \(v) does not fit uint32.") }
                slot.storeBytes(of: x, as: UInt32.self)
            case (.int64, .integer(let v)):
                slot.storeBytes(of: v, as: Int64.self)
            case (.uint64, .integer(let v)):
                guard let x = UInt64(exactly: v) else { throw TermindError.badRequest("\(position): \(v) does not fit uint64.") }
                slot.storeBytes(of: x, as: UInt64.self)
            case (.uint64, .unsignedInteger(let v)):
                slot.storeBytes(of: v, as: UInt64.self)
            case (.int32, .unsignedInteger(let v)), (.uint32, .unsignedInteger(let v)), (.int64, .unsignedInteger(let v)):
                throw TermindError.badRequest("\(position): \(v) does not fit \(type.rawValue).")
            case (.double, .integer(let v)):
                slot.storeBytes(of: Double(v), as: Double.self)
            case (.double, .unsignedInteger(let v)):
                slot.storeBytes(of: Double(v), as: Double.self)
            case (.double, .double(let v)):
                slot.storeBytes(of: v, as: Double.self)
            case (.bool, .bool(let v)):
                slot.storeBytes(of: v ? UInt8(1) : 0, as: UInt8.self)
            case (.string, .string(let v)):
                guard !v.utf8.contains(0), let copy = strdup(v) else { throw TermindError.badRequest("\(position): strings may not contain NUL bytes.") }
                strings.append(copy)
                slot.storeBytes(of: UnsafeRawPointer(copy), as: UnsafeRawPointer.self)
            default:
                throw TermindError.badRequest("\(position): expected \(type.rawValue), got \(value.typeName).")
            }
        }
        // libffi widens integral returns narrower than a word to ffi_arg.
        let result = UnsafeMutableRawPointer.allocate(byteCount: 16, alignment: 16)
        defer { result.deallocate() }
        result.initializeMemory(as: UInt64.self, repeating: 0, count: 2)
        ffi_call(cif, unsafeBitCast(symbol, to: (@convention(c) () -> Void).self), result, values)
        let word = result.load(as: UInt64.self)
        switch signature.returns {
        case .void: return .null
        case .int32: return .integer(Int64(Int32(truncatingIfNeeded: word)))
        case .uint32: return .integer(Int64(UInt32(truncatingIfNeeded: word)))
        case .int64: return .integer(Int64(bitPattern: word))
        case .uint64: return JSONValue(exactly: word)
        case .double:
            let value = result.load(as: Double.self)
            guard value.isFinite else { throw badResult("returned \(value), which JSON cannot represent") }
            return .double(value)
        case .bool: return .bool(UInt8(truncatingIfNeeded: word) != 0)
        case .string:
            guard let pointer = result.load(as: UnsafePointer<CChar>?.self) else { return .null }
            let limit = PluginLimits.maximumReplyBytes
            let length = strnlen(pointer, limit + 1)
            guard length <= limit else { throw badResult("returned a string longer than \(limit) bytes (the reply bound)") }
            let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
            if let bad = UTF8Validation.firstInvalidOffset(in: bytes) {
                throw badResult("returned a string that is not valid UTF-8 (byte \(bad))")
            }
            return .string(String(decoding: bytes, as: UTF8.self))
        }
    }
}

extension ForeignFunction {
    private func badResult(_ detail: String) -> TermindError {
        TermindError(.pluginBadReply, "plugin '\(plugin)': function '\(name)' (\(plugin).fn.\(name)@1) \(detail).")
    }
}

/// The request and response of a plugin function's contract (`<plugin>.fn.<name>@1`).
public enum ForeignFunctionCall {
    public struct Request: Codable, Sendable, Equatable {
        /// The arguments in order; may be left out for a function without parameters.
        public var args: [JSONValue]
        public init(args: [JSONValue]) { self.args = args }
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            args = try c.decodeIfPresent([JSONValue].self, forKey: .args) ?? []
        }
        enum CodingKeys: String, CodingKey { case args }
    }
    public struct Response: Codable, Sendable, Equatable {
        public var result: JSONValue
        public init(result: JSONValue) { self.result = result }
    }
}
