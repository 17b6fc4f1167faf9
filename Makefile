# Entry points; each script installs what it needs first.
.PHONY: test run bench build install uninstall
PREFIX ?= /usr/local
test:
	./scripts/test
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
