extension String {
    /// Decodes a NUL-terminated C buffer filled by a C call (invalid UTF-8 is repaired).
    init(nulTerminated buffer: [CChar]) {
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        self.init(decoding: bytes, as: UTF8.self)
    }
}
