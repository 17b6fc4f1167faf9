import TermindLauncher

// The `termind` executable: the launcher (see Launcher). It links the Swift runtime and
// Glibc only; the full client is a library it loads when a command runs in this process.
Launcher.main()
