#!/usr/bin/env bash
# Provides libssh2 >= 1.11.1 for the build, as the pkg-config package "termind-libssh2".
#
# Debian 12 ships libssh2 1.10 (SHA-1-only RSA signatures that OpenSSH >= 8.8 rejects, no
# AES-GCM/ChaCha20, no strict key exchange, missing later CVE fixes). When the system
# library is older, this builds Debian 13's source package — fetched with apt-get source
# (apt checks the signed index and the file hashes) and unpacked with dpkg-source so
# Debian's patches are applied — statically with -fPIC against the system's OpenSSL 3, and
# installs it under /usr/local/lib/termind/libssh2. The result is cached by version: a
# second run does nothing. Needs root (or sudo) like the apt installs in lib.sh.
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

# 1. A system libssh2 that is new enough.
if pkg-config --exists "libssh2 >= $WANTED_UPSTREAM" 2>/dev/null; then
    version=$(pkg-config --modversion libssh2)
    write_pc "$(pkg-config --variable=prefix libssh2)" "$(pkg-config --libs libssh2)" "$version"
    say "using the system libssh2 $version"
    exit 0
fi

# 2. Our cached build.
STAMP="$PREFIX/.debian-version"
if [ -f "$STAMP" ] && [ -f "$PREFIX/lib/libssh2.a" ] && [ -f "$PC_FILE" ]; then
    exit 0
fi

# 3. Build Debian 13's source package.
say "building libssh2 $WANTED_UPSTREAM from Debian's $DEBIAN_SUITE source package (about a minute)"
SOURCES=/etc/apt/sources.list.d/termind-$DEBIAN_SUITE-src.sources
if [ ! -f "$SOURCES" ]; then
    printf '%s\n' "Types: deb-src" "URIs: http://deb.debian.org/debian" "Suites: $DEBIAN_SUITE" "Components: main" \
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" | $SUDO tee "$SOURCES" >/dev/null
fi
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dpkg-dev libssl-dev build-essential >&2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
apt-get source --download-only -qq "libssh2/$DEBIAN_SUITE" >&2
dsc=$(ls libssh2_*.dsc | head -n 1)
debian_version=$(sed -n 's/^Version: //p' "$dsc")
dpkg-source --no-check -x "$dsc" src >&2
cd src
case "$debian_version" in "$WANTED_UPSTREAM"*) ;; *) say "unexpected libssh2 version $debian_version"; exit 1 ;; esac
CFLAGS="-O2 -fPIC" ./configure --prefix="$PREFIX" --disable-shared --enable-static --with-pic --with-crypto=openssl \
    --without-libz --disable-examples-build --disable-docker-tests --disable-sshd-tests >&2 || \
CFLAGS="-O2 -fPIC" ./configure --prefix="$PREFIX" --disable-shared --enable-static --with-pic --with-crypto=openssl \
    --without-libz --disable-examples-build >&2
make -j"$(nproc)" -C src >&2
$SUDO make -C src install >&2
$SUDO make install-data-am >&2   # headers and libssh2.pc
write_pc "$PREFIX" "-L\${prefix}/lib -lssh2 -lssl -lcrypto" "$debian_version"
echo "$debian_version" | $SUDO tee "$STAMP" >/dev/null
say "libssh2 $debian_version installed in $PREFIX"
