# Shared by the scripts that build a library from Debian 13's source package with termind's
# own patch series (libssh2.sh, libvterm.sh); sourced, never run. Needs $SUDO and say().

# The digest a build is cached by: the series file and every patch it lists.
patch_series_digest() { # patch-folder
    (cd "$1" && cat series $(grep -v '^#' series) | sha256sum | cut -c1-16)
}

# Fetches PACKAGE's source package from SUITE with apt-get source (apt checks the signed
# index and the file hashes), unpacks it with dpkg-source (Debian's own patches applied),
# checks that its version starts with WANTED, and applies termind's series from PATCHES in
# order. Leaves the working folder in the unpacked tree (removed when the script exits) and
# DEBIAN_VERSION set. Extra Debian packages the build needs follow PATCHES.
unpack_debian_source() { # package suite wanted patches [build-dependency...]
    local package="$1" suite="$2" wanted="$3" patches="$4"
    shift 4
    local sources=/etc/apt/sources.list.d/termind-$suite-src.sources
    if [ ! -f "$sources" ]; then
        printf '%s\n' "Types: deb-src" "URIs: http://deb.debian.org/debian" "Suites: $suite" "Components: main" \
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" | $SUDO tee "$sources" >/dev/null
    fi
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dpkg-dev build-essential "$@" >&2
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
    cd "$WORK"
    apt-get source --download-only -qq "$package/$suite" >&2
    local dsc
    dsc=$(ls "${package}"_*.dsc | head -n 1)
    DEBIAN_VERSION=$(sed -n 's/^Version: //p' "$dsc")
    dpkg-source --no-check -x "$dsc" src >&2
    cd src
    case "$DEBIAN_VERSION" in "$wanted"*) ;; *) say "unexpected $package version $DEBIAN_VERSION"; exit 1 ;; esac
    local patch
    for patch in $(grep -v '^#' "$patches/series"); do
        patch -p1 --forward --quiet < "$patches/$patch" >&2 || { say "termind's $package patch $patch does not apply to $DEBIAN_VERSION"; exit 1; }
    done
}
