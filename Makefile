# Entry points; each script installs what it needs first.
.PHONY: test interop soak run bench build install uninstall
PREFIX ?= /usr/local
test:
	./scripts/test
# Every cipher and MAC against OpenSSH's sshd with 256 MiB each way (make test moves 8).
interop:
	TERMIND_INTEROP_MIB=256 ./scripts/test --filter SSHCipherInteropTests
# 3,000 short in-process sessions, four at a time: a process that ends under live threads (make test runs 24).
soak:
	TERMIND_EXIT_RUNS=3000 ./scripts/test --filter TerminalSessionTests.testManyShortInProcessSessions
run:
	./scripts/termind $(ARGS)
bench:
	./scripts/bench $(ARGS)
build:
	bash -c 'source scripts/lib.sh && ensure_packages && build'
install:
	./scripts/install --prefix "$(PREFIX)"
uninstall:
	./scripts/install --prefix "$(PREFIX)" --uninstall
