import Glibc
import TermindKernel

// termind-plugin-host: runs one C plugin for termind in a process of its own (a manifest's
// "isolation": "process"); termind starts it, with the socket it talks over as standard input.
exit(PluginHostProcess.run(CommandLine.arguments))
