# Shared set-up for termind's scripts: install what the build needs from Debian
# packages (only when missing), build every product, and lay out the build folder the
# way termind expects it (Registry.json beside the executable, example plugins under
# plugins/). Sourced by scripts/termind, scripts/test and scripts/bench.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Debian packages the build and the tests need.
PACKAGES=(pkg-config libffi-dev libssl-dev libcurl4-openssl-dev libmicrohttpd-dev libsqlite3-dev sqlite3 binutils gcc openssl python3 util-linux openssh-client openssh-server libpam0g-dev iproute2 tmux zsh vim-tiny socat)

log() { printf 'termind-setup: %s\n' "$*" >&2; }

ensure_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq >&2
        # Installing openssh-server must not start a system sshd: the tests start their own
        # on free loopback ports. policy-rc.d exit 101 forbids service starts during the install.
        local policy=/usr/sbin/policy-rc.d added_policy=""
        if [ ! -e "$policy" ]; then
            printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null && $sudo chmod +x "$policy" && added_policy=1
        fi
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
        [ -z "$added_policy" ] || $sudo rm -f "$policy"
    fi
    command -v swift >/dev/null || { log "swift is not on PATH (expected the Swift 6 toolchain, e.g. /opt/swift/usr/bin)"; exit 1; }
    # libssh2 1.11.1 and libvterm 0.3.3 from Debian 13's source packages with termind's
    # patches (cached).
    bash "$ROOT/scripts/deps/libssh2.sh"
    bash "$ROOT/scripts/deps/libvterm.sh"
}

# build [extra swift build flags...]: builds all products and lays out the bin folder.
build() {
    cd "$ROOT"
    # SwiftPM does not notice an edit to a nested package's manifest alone (Core/ or APIs/
    # Package.swift) and keeps building with the old target graph: touching the root manifest
    # makes it reload.
    local plan
    for plan in .build/debug.yaml .build/release.yaml; do
        if [ -e "$plan" ] && { [ Core/Package.swift -nt "$plan" ] || [ APIs/Package.swift -nt "$plan" ]; }; then touch Package.swift; fi
    done
    # libssh2 is linked statically into libTermindCore.so and SwiftPM does not track it: when
    # scripts/deps/libssh2.sh has installed another build of it (a changed patch series),
    # remove the library so that it is linked again.
    local libssh2_stamp=/usr/local/lib/termind/libssh2/.termind-patches bin_path
    bin_path="$(swift build "$@" --show-bin-path)"
    if [ -f "$libssh2_stamp" ] && ! cmp -s "$libssh2_stamp" "$bin_path/.libssh2-patches"; then
        rm -f "$bin_path/libTermindCore.so"
    fi
    # The same for libvterm, linked statically into the Workspaces feature and the tests.
    local libvterm_stamp=/usr/local/lib/termind/libvterm/.termind-patches
    if [ -f "$libvterm_stamp" ] && ! cmp -s "$libvterm_stamp" "$bin_path/.libvterm-patches"; then
        rm -f "$bin_path/libTermindWorkspaces.so" "$bin_path/TermindPackageTests.xctest"
    fi
    # Build progress goes to stderr, and only when something was rebuilt (or failed), so
    # ./scripts/termind prints nothing but termind's own output on stdout.
    local log status=0
    log="$(mktemp)"
    swift build "$@" > "$log" 2>&1 || status=$?
    if [ "$status" -ne 0 ] || awk '!/Compiling plugin/ && /Compiling|Linking|warning:|error:/ { found = 1 } END { exit !found }' "$log"; then cat "$log" >&2; fi
    rm -f "$log"
    [ "$status" -eq 0 ] || return "$status"
    BIN="$bin_path"
    [ ! -f "$libssh2_stamp" ] || cp "$libssh2_stamp" "$BIN/.libssh2-patches"
    [ ! -f "$libvterm_stamp" ] || cp "$libvterm_stamp" "$BIN/.libvterm-patches"
    cp Registry.json "$BIN/Registry.json"
    # Example plugins, opt-in: termind --plugins "$BIN/plugins" ...
    for manifest in Plugins/Examples/*/plugin.json; do
        local dir name lib
        dir="$(dirname "$manifest")"
        name="$(basename "$dir")"
        lib="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["library"])' "$manifest")"
        mkdir -p "$BIN/plugins/$name"
        cp "$manifest" "$BIN/plugins/$name/plugin.json"
        cp "$BIN/$lib" "$BIN/plugins/$name/$lib"
    done
    export BIN
}
