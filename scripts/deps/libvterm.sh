#!/usr/bin/env bash
# Provides libvterm 0.3.3 for the build, as the pkg-config package "termind-vterm": the
# terminal state model of durable sessions (Features/Workspaces/Sources/TerminalScreen).
#
# Built from Debian 13's source package — fetched with apt-get source (apt checks the signed
# index and the file hashes), unpacked with dpkg-source — plus termind's own patch series in
# scripts/deps/libvterm/ (its `series` file, applied in order; each patch one change with a
# DEP-3 header saying why). The patches close holes a remote host could use: every byte a
# session prints reaches libvterm, and Debian 12's libvterm 0.1.4 (and 0.3.3 as released)
# writes outside a row's cells on a UTF-8 encoded C1 control.
#
# Compiled with gcc into a static archive of position-independent objects (linked into
# libTermindWorkspaces.so; no libvterm package is needed at run time), installed under
# /usr/local/lib/termind/libvterm, cached by the patch series' digest. Needs root (or sudo)
# like the apt installs in lib.sh.
set -euo pipefail

WANTED_UPSTREAM="0.3.3"
DEBIAN_SUITE="trixie"
PREFIX="/usr/local/lib/termind/libvterm"
PC_DIR="/usr/local/lib/pkgconfig"
PC_FILE="$PC_DIR/termind-vterm.pc"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
say() { printf 'termind-setup: %s\n' "$*" >&2; }

PATCHES="$(cd "$(dirname "${BASH_SOURCE[0]}")/libvterm" && pwd)"
source "$(dirname "${BASH_SOURCE[0]}")/debian-source.sh"
WANTED_PATCHES="$(patch_series_digest "$PATCHES")"

STAMP="$PREFIX/.termind-patches"
if [ "$(cat "$STAMP" 2>/dev/null)" = "$WANTED_PATCHES" ] && [ -f "$PREFIX/lib/libvterm.a" ] && [ -f "$PC_FILE" ]; then
    exit 0
fi

say "building libvterm $WANTED_UPSTREAM from Debian's $DEBIAN_SUITE source package with termind's patches"
unpack_debian_source libvterm "$DEBIAN_SUITE" "$WANTED_UPSTREAM" "$PATCHES"
debian_version="$DEBIAN_VERSION"
# The upstream Makefile wants libtool; the library is its src/*.c (the generated tables ship
# in the tarball), so gcc builds it directly.
mkdir -p objects
for source in src/*.c; do
    gcc -O2 -fPIC -std=c99 -Iinclude -c "$source" -o "objects/$(basename "$source" .c).o"
done
ar rcs libvterm.a objects/*.o
$SUDO rm -rf "$PREFIX"
$SUDO mkdir -p "$PREFIX/lib" "$PREFIX/include" "$PC_DIR"
$SUDO install -m 644 libvterm.a "$PREFIX/lib/"
$SUDO install -m 644 include/vterm.h include/vterm_keycodes.h "$PREFIX/include/"
printf '%s\n' "prefix=$PREFIX" "Name: termind-vterm" "Description: libvterm for termind" "Version: $debian_version+termind" \
    'Cflags: -I${prefix}/include' 'Libs: -L${prefix}/lib -lvterm' | $SUDO tee "$PC_FILE" >/dev/null
echo "$WANTED_PATCHES" | $SUDO tee "$STAMP" >/dev/null
say "libvterm $debian_version with termind's patches ($WANTED_PATCHES) installed in $PREFIX"
