import Foundation
import TermindCore
import TermindKernel

// termind's entry point: parse, dispatch, exit with a meaningful code.
let exitCode: Invocation.Exit
do {
    let inv = try Invocation.parse(Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment)
    do {
        let builtins = RegistryValidator.hostCommands
        let wantsGeneralHelp = inv.command == nil || (inv.command == "help" && inv.arguments.isEmpty)
            || (inv.help && builtins.contains(inv.command ?? ""))
        switch inv.command {
        case _ where wantsGeneralHelp, nil:
            Output.line(await Help.general(inv))
            exitCode = .success
        case "help"?:
            // `termind help vault host add`: the words after `help` name the command.
            var helpInv = inv
            helpInv.help = true
            helpInv.arguments = Array(inv.arguments.dropFirst())
            exitCode = try await PluginCommand.run(inv.arguments[0], helpInv)
        case "features"?: exitCode = try await Commands.features(inv)
        case "contracts"?: exitCode = try await Commands.contracts(inv)
        case "call"?: exitCode = try await Commands.call(inv)
        case "serve"?: exitCode = try await Serve.run(inv)
        case "version"?: exitCode = try await Commands.version(inv)
        case "plugins"?: exitCode = try await Commands.plugins(inv)
        case "secrets"?: exitCode = try await Commands.secrets(inv)
        case "bench"?: exitCode = try await Bench.run(inv)
        case "completion"?: exitCode = try await Completion.run(inv)
        case let name?: exitCode = try await PluginCommand.run(name, inv)
        }
    } catch {
        exitCode = Output.failure(error, json: inv.json)
    }
} catch {
    exitCode = Output.failure(error, json: CommandLine.arguments.contains("--json"))
}
exit(exitCode.rawValue)
