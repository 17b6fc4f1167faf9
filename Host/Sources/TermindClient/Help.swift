import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindHelpText
import TermindKernel

enum Help {
    /// The general help with the commands of the features and plugins this invocation
    /// loads (or the running server has) in place.
    static func general(_ inv: Invocation) async -> String {
        do {
            return HelpText.general(try await Session.with(inv) { session in
                try await session.call(KernelContracts.Features.self, Empty()).features.filter { $0.state == .running }.map(helpFeature)
            })
        } catch {
            let reason = (error as? TermindError)?.message ?? (error as? BootFailure)?.description ?? "\(error)"
            return HelpText.general([], unavailable: reason)
        }
    }

    /// A running feature as the help shows it.
    static func helpFeature(_ status: FeatureStatus) -> HelpText.Feature {
        HelpText.Feature(id: status.id, title: status.help?.title, rank: status.help?.rank, isPlugin: status.source.hasSuffix("plugin.json"),
                         commands: status.commands.map { HelpText.Command(name: $0.name, arguments: $0.arguments, summary: $0.summary) },
                         serveOptions: (status.serveOptions ?? []).map { ($0.name, $0.value, $0.summary) })
    }
}
