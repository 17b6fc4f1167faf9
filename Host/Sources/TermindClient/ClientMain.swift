import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindKernel

/// The generic client: parse, dispatch, and the exit code that means something. It runs in
/// the process that was started (`termind_client_main`, which the launcher calls when no
/// server takes the command) or inside `termind serve` for a launcher (RemoteInvocation).
enum ClientMain {
    static func run(_ arguments: [String], console: Console, server: Kernel? = nil) async -> Invocation.Exit {
        let inv: Invocation
        do {
            inv = try Invocation.parse(arguments, console: console, server: server)
        } catch {
            return console.failure(error, json: arguments.contains("--json"))
        }
        return await run(inv)
    }

    static func run(_ inv: Invocation) async -> Invocation.Exit {
        do {
            let builtins = RegistryValidator.hostCommands
            let wantsGeneralHelp = inv.command == nil || (inv.command == "help" && inv.arguments.isEmpty)
                || (inv.help && builtins.contains(inv.command ?? ""))
            switch inv.command {
            case _ where wantsGeneralHelp, nil:
                inv.console.line(await Help.general(inv))
                return .success
            case "help"?:
                // `termind help vault host add`: the words after `help` name the command.
                var helpInv = inv
                helpInv.help = true
                helpInv.arguments = Array(inv.arguments.dropFirst())
                return try await PluginCommand.run(inv.arguments[0], helpInv)
            case "features"?: return try await Commands.features(inv)
            case "contracts"?: return try await Commands.contracts(inv)
            case "call"?: return try await Commands.call(inv)
            case "serve"?: return try await Serve.run(inv)
            case "version"?: return try await Commands.version(inv)
            case "plugins"?: return try await Commands.plugins(inv)
            case "secrets"?: return try await Commands.secrets(inv)
            case "bench"?: return try await Bench.run(inv)
            case "completion"?: return try await Completion.run(inv)
            case let name?: return try await PluginCommand.run(name, inv)
            }
        } catch {
            return inv.console.failure(error, json: inv.json)
        }
    }
}

/// The entry the launcher calls when the command runs in this process: runs the client on
/// this process's console and exits with its code.
///
/// It ends with `_exit`, not `exit`: the kernel's threads (an SSH engine closing its
/// connection, executor and dispatch workers) are still running, and `exit` runs the
/// process's exit handlers and static destructors under them. An engine thread that ended
/// at that moment died of "double free" in its thread-specific data's destructors while
/// this thread was inside the exit handlers (CI once; 2 in 3,600 local runs of
/// `termind ssh … -- cmd`, six at a time, none in 11,700 with `_exit`). Everything the
/// client wrote is out once its console has finished and stdio is flushed; the store needs
/// no exit handler (a committed SQLite transaction is already in its WAL file).
@_cdecl("termind_client_main")
public func termindClientMain() {
    let arguments = Array(CommandLine.arguments.dropFirst())
    Task {
        let console = Console.process()
        let code = await ClientMain.run(arguments, console: console)
        console.finish()
        fflush(nil)
        _exit(code.rawValue)
    }
    dispatchMain()
}
