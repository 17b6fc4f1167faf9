import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindKernel
import TermindStore

/// Runs a command a feature declared in its manifest: positional arguments fill the
/// declared fields in order, `--field value` fills any other field, values are typed by
/// the contract's schema, and declared path fields are made absolute.
enum PluginCommand {
    /// The command belongs to a feature that is disabled.
    static let commandUnavailable: ErrorCode = "command.unavailable"

    static func run(_ name: String, _ inv: Invocation) async throws -> Invocation.Exit {
        // What is left once the session is closed (a stream's result and exit status).
        let after = try await Session.with(inv) { session -> () -> Invocation.Exit in
            try await run(name, inv, session: session)
        }
        return after()
    }

    private static func run(_ name: String, _ inv: Invocation, session: Session) async throws -> () -> Invocation.Exit {
        do {
            let words = [name] + inv.arguments
            // One round trip: the command, with its contract's schemas.
            let resolved = try await session.call(KernelContracts.Command.self, .init(words: words))
            guard let command = resolved.command else {
                let prefix = words.prefix { !$0.hasPrefix("-") }
                if !resolved.partial.isEmpty {
                    // `termind vault host`: list what can follow.
                    inv.console.line("Usage: termind \(prefix.joined(separator: " ")) <command>")
                    for c in resolved.partial { inv.console.line("  \(c.name.padded(to: 24))  \(c.summary ?? "")") }
                    return { inv.help ? .success : .usage }
                }
                if let disabled = resolved.disabledFeature {
                    throw TermindError(PluginCommand.commandUnavailable, "'\(name)' belongs to feature '\(disabled)', which is disabled: \(resolved.disabledReason ?? "unknown reason").")
                }
                if let nearest = resolved.nearest, let near = resolved.nearestCommands, !near.isEmpty {
                    // `termind vault host rm X`: say which word is wrong and what it could be.
                    let wrong = prefix.dropFirst(nearest.count).first ?? ""
                    let choices = near.map { $0.words.dropFirst(nearest.count).joined(separator: " ") }
                    throw Invocation.UsageError(description: "'termind \(nearest.joined(separator: " "))' has no command '\(wrong)'; it has: \(choices.joined(separator: ", ")).")
                }
                let available = resolved.available
                throw Invocation.UsageError(description: "Unknown command '\(name)'.\(available.isEmpty ? "" : " Commands from features and plugins: \(available.joined(separator: ", ")).")")
            }
            if inv.help {
                usage(command, console: inv.console)
                return { .success }
            }
            let info = resolved.target
            var body = try buildBody(command, arguments: Array(words.dropFirst(command.words.count)), schema: info?.request ?? .object([:]),
                                     readsInput: command.stream != nil && info?.acceptsInput == true, console: inv.console)
            if let field = command.output { body[field] = .string(inv.json ? "json" : "text") }
            if let field = command.interactive { body[field] = .bool(inv.console.isTerminal(inv.console.input)) }
            if let stream = command.stream {
                return try await StreamCommand.run(stream, body: body, acceptsInput: info?.acceptsInput == true,
                                                   acceptsDescriptors: info?.acceptsDescriptors == true, terminalField: command.terminal,
                                                   emitsOutput: info.map { $0.events?["stdout"] != nil || $0.events?["stderr"] != nil } ?? true,
                                                   quietResult: command.quietResult == true, interruptible: command.interruptible == true,
                                                   inv: inv, session: session)
            }
            let reply = try await session.call(command.target, body: JSONCoding.encode(body))
            if inv.json { inv.console.json(reply) } else { inv.console.human(try JSONCoding.parse(reply, source: "reply"), columns: command.columns) }
            return { .success }
        }
    }

    static func usage(_ command: FeatureManifest.Command, console: Console) {
        let arguments = command.arguments.enumerated().map { index, name in
            guard name.hasSuffix("...") else { return name.uppercased() }
            return (index == command.arguments.count - 1 ? "[--] " : "") + name.dropLast(3).uppercased() + "..."
        }
        let switches = (command.flags ?? [:]).keys.sorted().map { "[-\($0)]" }
        console.line("Usage: termind \(command.name) \((switches + arguments).joined(separator: " ")) [--FIELD VALUE ...]")
        for (letter, field) in (command.flags ?? [:]).sorted(by: { $0.key < $1.key }) { console.line("  -\(letter)  --\(field) true") }
        for (letter, field) in (command.options ?? [:]).sorted(by: { $0.key < $1.key }) { console.line("  -\(letter) VALUE  --\(field) VALUE") }
        if let summary = command.summary { console.line(summary) }
        for line in command.help ?? [] { console.line(line) }
        let kind = command.stream == nil ? "Calls contract" : "Runs stream"
        console.line("\(kind) \(command.target); see 'termind contracts \(command.target)' for every field (--field-name or --fieldName).")
    }

    static func buildBody(_ command: FeatureManifest.Command, arguments: [String], schema: JSONValue, readsInput: Bool = false,
                          console: Console) throws -> [String: JSONValue] {
        do {
            return try parseBody(command, arguments: arguments, schema: schema, readsInput: readsInput, console: console)
        } catch var error as Invocation.UsageError {
            // Its remedy is the command's own help.
            if error.command == nil { error.command = command.name }
            throw error
        }
    }

    private static func parseBody(_ command: FeatureManifest.Command, arguments: [String], schema: JSONValue, readsInput: Bool,
                                  console: Console) throws -> [String: JSONValue] {
        var body: [String: JSONValue] = [:]
        var positional: [String] = []
        var index = 0
        var optionsEnded = false
        // A command whose last argument is a command line (`ssh HOST [COMMAND...]`, declared
        // `stopsOptions`) reads options as ssh does: up to the command's first word, after which every word is the
        // command's (`termind ssh box ls -la`); before it, a one-letter option the command
        // does not declare is an error, never a word of the command (`termind ssh box -N`).
        let commandLine: String? = command.stopsOptions == true ? command.arguments.last.flatMap { last in
            last.hasSuffix("...") ? String(last.dropLast(3)) : nil
        } : nil
        var commandStarted = false
        /// How many positional words came before `--`.
        var dashesAt: Int?
        while index < arguments.count {
            let arg = arguments[index]
            if commandStarted {
                positional.append(arg)
            } else if !optionsEnded && arg == "--" {
                // Everything after `--` is positional, even when it looks like an option.
                optionsEnded = true
                dashesAt = positional.count
            } else if !optionsEnded, let options = command.options, arg.hasPrefix("-"), !arg.hasPrefix("--"), arg.count > 1,
                      let field = options[String(arg.dropFirst().prefix(1))] {
                // `-L VALUE` or `-LVALUE`: a one-letter option the command declares.
                var value = String(arg.dropFirst(2))
                if value.isEmpty {
                    index += 1
                    guard index < arguments.count else { throw Invocation.UsageError(description: "\(arg) needs a value (as --\(field)).") }
                    value = arguments[index]
                }
                if case .array(let earlier)? = body[field], case .array(let more) = try typed(value, field: field, schema: schema, console: console) {
                    body[field] = .array(earlier + more)
                } else {
                    body[field] = try typed(value, field: field, schema: schema, console: console)
                }
            } else if !optionsEnded, let flags = command.flags, arg.hasPrefix("-"), !arg.hasPrefix("--"), arg.count > 1,
                      arg.dropFirst().allSatisfy({ flags[String($0)] != nil }) {
                // `-r`, `-rp`: switches the command declares, each setting its field to true.
                for letter in arg.dropFirst() { body[flags[String(letter)]!] = .bool(true) }
            } else if !optionsEnded, arg.hasPrefix("--"), arg.count > 2 {
                var key = String(arg.dropFirst(2))
                var value: String
                if let eq = key.firstIndex(of: "=") {
                    value = String(key[key.index(after: eq)...])
                    key = String(key[..<eq])
                    key = fieldName(key)
                } else {
                    key = fieldName(key)
                    index += 1
                    guard index < arguments.count else { throw Invocation.UsageError(description: "--\(key) needs a value.") }
                    value = arguments[index]
                }
                if command.secrets?.contains(key) == true {
                    guard value == "-" else {
                        throw Invocation.UsageError(description: "--\(key) is a secret: give it as '--\(key) -' and type it or pipe it on standard input, never on the command line.")
                    }
                    let secret = try SecretInput.read(prompt: "\(key): ", console: console)
                    // An empty read is a mistake (empty input, a pipe that failed), never a secret.
                    guard !secret.isEmpty else {
                        throw Invocation.UsageError(description: "--\(key) -: the \(key) read from \(console.isTerminal(console.input) ? "the terminal" : "standard input") is empty; nothing was changed.")
                    }
                    body[key] = .string(secret)
                } else if case .array(let earlier)? = body[key], case .array(let more) = try typed(value, field: key, schema: schema, console: console) {
                    // A list given more than once gathers them all (`--local-forward A --local-forward B`, as ssh's -L).
                    body[key] = .array(earlier + more)
                } else {
                    body[key] = try typed(value, field: key, schema: schema, console: console)
                }
            } else {
                if let commandLine, !optionsEnded, arg.hasPrefix("-"), arg.count > 1 {
                    let known = ((command.options ?? [:]).keys.map { "-\($0) VALUE" } + (command.flags ?? [:]).keys.map { "-\($0)" }).sorted()
                    throw Invocation.UsageError(description: "\(command.name): unknown option \(arg)\(known.isEmpty ? "" : " (it takes \(known.joined(separator: ", ")) and --FIELD VALUE)"); "
                        + "words after -- are the \(commandLine)'s.")
                }
                positional.append(arg)
                if commandLine != nil, !optionsEnded, positional.count >= command.arguments.count { commandStarted = true }
            }
            index += 1
        }
        // A last argument written `field...` takes the remaining words: joined with spaces
        // for a string field (a remote command line, as ssh joins its words), else a list.
        var fields = command.arguments
        // A `field...` before the last fields takes the words between (`cp SOURCES... DESTINATION`).
        if let middle = fields.firstIndex(where: { $0.hasSuffix("...") }), middle < fields.count - 1 {
            let name = String(fields[middle].dropLast(3))
            let taken = positional.count - (fields.count - 1)
            guard taken >= 1 else {
                let shape = fields.map { $0.hasSuffix("...") ? $0.dropLast(3).uppercased() + "..." : $0.uppercased() }.joined(separator: " ")
                throw Invocation.UsageError(description: "\(command.name) takes \(shape) (at least \(fields.count) words), got \(positional.count).")
            }
            body[name] = .array(positional[middle..<(middle + taken)].map { .string($0) })
            positional.removeSubrange(middle..<(middle + taken))
            fields.remove(at: middle)
        }
        let required: Set<String> = if case .array(let names)? = schema["required"] { Set(names.compactMap(\.stringValue)) } else { [] }
        // Words after `--` fill a trailing `field...` alone when the fields between are optional
        // (`snippet run -- uptime`: no snippet named, the words are the command).
        if let dashes = dashesAt, let last = fields.last, last.hasSuffix("..."), dashes < fields.count - 1,
           fields[dashes..<(fields.count - 1)].allSatisfy({ !required.contains($0) }) {
            fields.removeSubrange(dashes..<(fields.count - 1))
        }
        if let last = fields.last, last.hasSuffix("...") {
            let rest = String(last.dropLast(3))
            fields[fields.count - 1] = rest
            if positional.count > fields.count {
                let words = positional[(fields.count - 1)...]
                positional = Array(positional[..<(fields.count - 1)])
                positional.append(words.joined(separator: " "))
                if schema["properties"]?[rest]?["type"]?.stringValue != "string" {
                    body[rest] = .array(words.map { .string($0) })
                    positional.removeLast()
                }
            }
        }
        guard positional.count <= fields.count else {
            throw Invocation.UsageError(description: "\(command.name) takes \(fields.count) argument\(fields.count == 1 ? "" : "s") (\(fields.map { $0.uppercased() }.joined(separator: " "))), got \(positional.count).")
        }
        for (field, value) in zip(fields, positional) {
            guard body[field] == nil else {
                throw Invocation.UsageError(description: "\(command.name): \(field.uppercased()) is given twice, as an argument ('\(value)') and as --\(field); give it once.")
            }
            body[field] = try typed(value, field: field, schema: schema, console: console)
        }
        // A trailing `field...` the request does not require may be left out (a shell's command),
        // and so may the fields before one that the request does not require (`snippet run -- …`).
        let rest = command.arguments.last?.hasSuffix("...") == true ? fields.last : nil
        if let missing = fields.first(where: { body[$0] == nil && (required.contains($0) || rest == nil) }) {
            throw Invocation.UsageError(description: "\(command.name) needs \(missing.uppercased()).")
        }
        // Local paths travel absolute (a server has its own working folder); "-" stays
        // standard input for a stream that reads it.
        for field in command.paths ?? [] {
            if case .string(let path)? = body[field], !(path == "-" && readsInput) { body[field] = .string(console.absolute(path)) }
        }
        if let field = command.workingDirectory { body[field] = .string(console.workingDirectory) }
        for (field, name) in command.environment ?? [:] {
            if let value = console.variable(name) { body[field] = .string(value) }
        }
        for (field, value) in command.values ?? [:] { body[field] = value }
        return body
    }

    /// `--accept-host-key` names the field `acceptHostKey` (the field's own name works too).
    static func fieldName(_ option: String) -> String {
        let parts = option.split(separator: "-", omittingEmptySubsequences: true)
        guard parts.count > 1 else { return option }
        return String(parts[0]) + parts.dropFirst().map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
    }

    /// A command-line value typed by the field's schema. Structured fields (objects, arrays
    /// of anything but plain values) take JSON, inline or `@FILE` (`@-`: standard input); a
    /// file holding an object with a member named like the field gives that member, so a
    /// preview's `--json` report can be passed on as it is (`--files @preview.json`).
    ///
    /// An array of plain values takes `a,b,c` (split at commas outside brackets), `@FILE`,
    /// or a JSON array of its items' type (`["a","b"]`). A value starting with `[` that is
    /// not such an array is text like any other: an ssh forward with an IPv6 address
    /// (`[::1]:8080:[fd00::5]:80`) is one item, not malformed JSON.
    static func typed(_ text: String, field: String, schema: JSONValue, console: Console) throws -> JSONValue {
        let property = schema["properties"]?[field]
        let itemType = property?["items"]?["type"]?.stringValue
        let plainItems = ["string", "integer", "number", "boolean"].contains(itemType ?? "")
        let structured = switch property?["type"]?.stringValue {
        case "object"?: true
        case "array"?: !plainItems || text.hasPrefix("@") || (text.hasPrefix("[") && isJSONArray(text, of: itemType))
        default: false
        }
        if structured {
            return try structuredValue(text, field: field, expected: property?["type"]?.stringValue ?? "object", console: console)
        }
        switch property?["type"]?.stringValue {
        case "array"?:
            let items = listItems(text).map { $0.trimmedWhitespace }.filter { !$0.isEmpty }
            return .array(try items.map { try typed(item: $0, field: field, type: itemType, console: console) })
        case "integer"?:
            if let v = Int64(text) { return .integer(v) }
            if let v = UInt64(text) { return JSONValue(exactly: v) }
            throw Invocation.UsageError(description: "--\(field) must be an integer, got '\(text)'.")
        case "number"?:
            guard let v = Double(text) else { throw Invocation.UsageError(description: "--\(field) must be a number, got '\(text)'.") }
            return .double(v)
        case "boolean"?:
            switch text.lowercased() {
            case "true", "yes", "1": return .bool(true)
            case "false", "no", "0": return .bool(false)
            default: throw Invocation.UsageError(description: "--\(field) must be true or false, got '\(text)'.")
            }
        default:
            return .string(text)
        }
    }

    /// Whether `text` is a JSON array whose items all have the plain type `itemType`.
    static func isJSONArray(_ text: String, of itemType: String?) -> Bool {
        guard case .array(let items)? = try? JSONCoding.parse(Data(text.utf8), source: "the value") else { return false }
        return items.allSatisfy { item in
            switch (itemType, item) {
            case ("string"?, .string), ("boolean"?, .bool), ("integer"?, .integer), ("integer"?, .unsignedInteger),
                 ("number"?, .integer), ("number"?, .unsignedInteger), ("number"?, .double): true
            default: false
            }
        }
    }

    /// The items of `a,b,c`: split at commas outside brackets, so a bracketed part
    /// (`[fd00::5]`, or any `[…]` a value holds) stays whole.
    static func listItems(_ text: String) -> [String] {
        var items: [String] = []
        var current = ""
        var depth = 0
        for character in text {
            switch character {
            case "[": depth += 1
            case "]": depth = max(0, depth - 1)
            case "," where depth == 0:
                items.append(current)
                current = ""
                continue
            default: break
            }
            current.append(character)
        }
        items.append(current)
        return items
    }

    /// One element of an `a,b,c` list.
    private static func typed(item: String, field: String, type: String?, console: Console) throws -> JSONValue {
        guard let type, type != "string" else { return .string(item) }
        let schema: JSONValue = .object(["properties": .object([field: .object(["type": .string(type)])])])
        return try typed(item, field: field, schema: schema, console: console)
    }

    private static func structuredValue(_ text: String, field: String, expected: String, console: Console) throws -> JSONValue {
        // "-" alone is standard input, as "@-" (`termind --json settings set KEY -`).
        let text = text == "-" ? "@-" : text
        let source: String
        let data: Data
        if text.hasPrefix("@") {
            let path = String(text.dropFirst())
            source = path == "-" ? "standard input" : path
            if path == "-" {
                // Bounded as a file is: a runaway pipe is an error, not all of memory.
                data = try console.readAll(limit: 16 << 20, what: "--\(field) @-")
            } else {
                do {
                    data = try BoundedFile.read(console.absolute(path), limit: 16 << 20, what: "--\(field) file", code: Invocation.UsageError.code)
                } catch let error as TermindError {
                    throw Invocation.UsageError(description: "--\(field) \(text): \(error.message)")
                }
            }
        } else {
            source = "the command line"
            data = Data(text.utf8)
        }
        var value: JSONValue
        do {
            value = try JSONCoding.parse(data, source: "--\(field)")
        } catch let error as TermindError {
            throw Invocation.UsageError(description: "--\(field) takes JSON (an \(expected), inline or @FILE) and \(source) does not hold it: \(error.message)")
        }
        if text.hasPrefix("@"), expected != "object" || value[field] != nil, case .object(let members) = value, let member = members[field] {
            value = member
        }
        guard value.typeName == expected else {
            throw Invocation.UsageError(description: "--\(field) must be a JSON \(expected), and \(source) holds \(value.typeName == "object" ? "an" : "a") \(value.typeName).")
        }
        return value
    }
}
