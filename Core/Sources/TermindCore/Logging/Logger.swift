/// A logger handed to one feature (or kernel part). Lines carry the feature's label, a
/// literal `LogCode` and typed, non-sensitive metadata only — see `LogValue`.
public struct Logger: Sendable {
    public let label: String
    private let sink: LogSink

    public init(label: String, sink: LogSink) {
        self.label = label
        self.sink = sink
    }

    /// A logger for a sub-component, e.g. `kernel` → `kernel.socket`.
    public func child(_ suffix: String) -> Logger { Logger(label: "\(label).\(suffix)", sink: sink) }

    public func isEnabled(_ level: LogLevel) -> Bool { sink.isEnabled(level) }

    public func log(_ level: LogLevel, _ code: LogCode, _ metadata: KeyValuePairs<String, LogValue> = [:]) {
        sink.write(level: level, label: label, code: code, metadata: metadata)
    }
    public func debug(_ code: LogCode, _ metadata: KeyValuePairs<String, LogValue> = [:]) { log(.debug, code, metadata) }
    public func info(_ code: LogCode, _ metadata: KeyValuePairs<String, LogValue> = [:]) { log(.info, code, metadata) }
    public func warning(_ code: LogCode, _ metadata: KeyValuePairs<String, LogValue> = [:]) { log(.warning, code, metadata) }
    public func error(_ code: LogCode, _ metadata: KeyValuePairs<String, LogValue> = [:]) { log(.error, code, metadata) }
}
