#!/usr/bin/env bash
# Provides libssh2 1.11.1 for the build, as the pkg-config package "termind-libssh2".
#
# termind always builds libssh2 itself, from Debian 13's source package — fetched with
# apt-get source (apt checks the signed index and the file hashes) and unpacked with
# dpkg-source so Debian's patches are applied — plus termind's own patch series in
# scripts/deps/libssh2/ (listed in its `series` file, applied in order like Debian's; each
# patch is one change with a DEP-3 header saying why). The patches put libssh2's data path
# on OpenSSL's bulk ciphers; a system libssh2, even a new enough one, lacks them.
# Debian 12's own libssh2 1.10 would not do anyway (SHA-1-only RSA signatures that OpenSSH
# >= 8.8 rejects, no AES-GCM/ChaCha20, no strict key exchange, missing CVE fixes).
#
# It is built statically with -fPIC against the system's OpenSSL 3 and installed under
# /usr/local/lib/termind/libssh2. The result is cached by the patch series' digest: a
# second run does nothing, and a changed patch rebuilds. Needs root (or sudo) like the apt
# installs in lib.sh.
set -euo pipefail

WANTED_UPSTREAM="1.11.1"
DEBIAN_SUITE="trixie"
PREFIX="/usr/local/lib/termind/libssh2"
PC_DIR="/usr/local/lib/pkgconfig"
PC_FILE="$PC_DIR/termind-libssh2.pc"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
say() { printf 'termind-setup: %s\n' "$*" >&2; }

write_pc() { # prefix libs version
    $SUDO mkdir -p "$PC_DIR"
    printf '%s\n' "prefix=$1" "Name: termind-libssh2" "Description: libssh2 for termind" "Version: $3" \
        'Cflags: -I${prefix}/include' "Libs: $2" | $SUDO tee "$PC_FILE" >/dev/null
}

PATCHES="$(cd "$(dirname "${BASH_SOURCE[0]}")/libssh2" && pwd)"
# What the cache is keyed by: the series and every patch in it.
source "$(dirname "${BASH_SOURCE[0]}")/debian-source.sh"
WANTED_PATCHES="$(patch_series_digest "$PATCHES")"

# 1. Our cached build, when it carries this patch series.
STAMP="$PREFIX/.termind-patches"
if [ "$(cat "$STAMP" 2>/dev/null)" = "$WANTED_PATCHES" ] && [ -f "$PREFIX/lib/libssh2.a" ] && [ -f "$PC_FILE" ]; then
    exit 0
fi

# 2. Build Debian 13's source package with termind's patches.
say "building libssh2 $WANTED_UPSTREAM from Debian's $DEBIAN_SUITE source package with termind's patches (about a minute)"
unpack_debian_source libssh2 "$DEBIAN_SUITE" "$WANTED_UPSTREAM" "$PATCHES" libssl-dev
debian_version="$DEBIAN_VERSION"
CFLAGS="-O2 -fPIC" ./configure --prefix="$PREFIX" --disable-shared --enable-static --with-pic --with-crypto=openssl \
    --without-libz --disable-examples-build --disable-docker-tests --disable-sshd-tests >&2 || \
CFLAGS="-O2 -fPIC" ./configure --prefix="$PREFIX" --disable-shared --enable-static --with-pic --with-crypto=openssl \
    --without-libz --disable-examples-build >&2
make -j"$(nproc)" -C src >&2
$SUDO make -C src install >&2
$SUDO make install-data-am >&2   # headers and libssh2.pc
write_pc "$PREFIX" "-L\${prefix}/lib -lssh2 -lssl -lcrypto" "$debian_version+termind"
echo "$debian_version" | $SUDO tee "$PREFIX/.debian-version" >/dev/null
echo "$WANTED_PATCHES" | $SUDO tee "$STAMP" >/dev/null
say "libssh2 $debian_version with termind's patches ($WANTED_PATCHES) installed in $PREFIX"
