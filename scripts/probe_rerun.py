"""Rerun bad-input probe 3's cases that were not OK (and a sample of its OK and clear-error
cases) against this checkout, and print the verdict of each today as a Markdown table.

    .venv/bin/python scripts/probe_rerun.py [--only ID,ID,...] [--md FILE]

The probe is ``../shared/research/bad-input-probe-3.md``; its case ids (O9, R19, A3, ...) are
kept. Everything runs in a fresh temporary folder (removed at the end) with this interpreter's
``dstar`` first on ``PATH``; commands use the ``tiny`` preset and one step where they run at all.
Cases that needed a long run to show their outcome then (a kill during ``dstar run``'s compile, a
Ctrl-C while a cache is written, a damaged cached Verilog) are reproduced with a fake slow or
quick step; their ``what`` says so. Read-only and full file systems are private ``tmpfs`` mounts
(``unshare -m``, needs root); without them those cases say "not run here".

Verdicts, as the probe's: **OK**; **clear error** (status 2, one ``dstar: error:`` line naming
the bad value, or in the API an exception whose message names it); **traceback** (an uncaught
exception; in the API an internal error type such as ``IndexError``); **silent wrong**;
**unclear** (refused without naming the value, or another status); **hang** (the time limit).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BIN = Path(sys.executable).parent
BEGIN, END = "<!-- probe_rerun.py: begin -->", "<!-- probe_rerun.py: end -->"
T = "--preset tiny --set max_k=512 --set max_m=512"        # the smallest `dstar run` accepts
RUN = f"{T} --sim icarus --tokens 1 --steps 1"
A = "dstar analyze --preset tiny --samples 1 --steps 2 --quiet"
BENCH = "dstar bench cycles --preset tiny --steps 2 --blocks 0 --layers mlp.fc1"
INTERNAL = ("AttributeError", "IndexError", "ZeroDivisionError", "RecursionError", "NameError",
            "UnboundLocalError", "AssertionError")


@dataclass
class Result:
    rc: int | None          # None: the time limit
    out: str
    err: str
    api: bool = False


@dataclass
class Case:
    id: str
    what: str
    cmd: str                # a bash command in the scratch folder, or an API expression
    then: str               # the probe's verdict
    names: tuple = ()       # a clear error's line must hold each of these (the bad value)
    ok: object = None       # for an expected success: Result -> bool
    timeout: float = 120
    group: str = ""         # API cases: the prelude they run after (one process per group)
    mounts: bool = False    # needs unshare -m (read-only or full tmpfs)
    extra: object = None    # Result -> bool, checked on a clear error too (nothing written ...)


def err(*names, extra=None):
    return {"names": names, "extra": extra}


def ok(check):
    return {"ok": check}


def last_line(r: Result) -> str:
    lines = [ln for ln in (r.err if r.rc else r.out).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def judge(c: Case, r: Result) -> str:
    if r.rc is None:
        return "hang"
    if "Traceback (most recent call last)" in r.err:
        return "traceback"
    if r.api and r.rc and r.err.split(":")[0] in INTERNAL:
        return "traceback"
    if c.ok is not None:
        return "OK" if c.ok(r) else ("silent wrong" if r.rc == 0 else "unclear")
    if r.rc == 0:
        return "silent wrong"
    line = last_line(r)
    errors = [ln for ln in r.err.splitlines() if "error:" in ln] if not r.api else [line]
    fine = (r.api or r.rc == 2) and len(errors) == 1 and all(n in line for n in c.names)
    if fine and c.extra is not None and not c.extra(r):
        return "half-written"
    return "clear error" if fine else "unclear"


def case(id, what, cmd, then, expect, **kw) -> Case:
    return Case(id, what, cmd, then, **expect, **kw)


# ---- fixtures ---------------------------------------------------------------------------------

FIXTURES = r'''
import io, json, zipfile
import numpy as np
r = np.random.default_rng(0); S = 3
x = r.standard_normal((S, 8, 32)).astype("f4"); w = r.standard_normal((16, 32)).astype("f4")
base = {"format": np.array("dstar-trace/1"), "steps": np.array(S),
        "linear/blk.fc1/x": x, "linear/blk.fc1/weight": w}
import os; os.makedirs("tr", exist_ok=True)
np.savez("tr/valid.npz", **base)
np.savez("tr/n0.npz", **{**base, "linear/blk.fc1/x": np.zeros((S, 0, 32), "f4")})
np.savez("tr/x_nan.npz", **{**base, "linear/blk.fc1/x": np.full((S, 8, 32), np.nan, "f4")})
fc2 = {"linear/blk.fc2/x": r.standard_normal((S, 4, 16)).astype("f4"),
       "linear/blk.fc2/weight": r.standard_normal((32, 16)).astype("f4")}
np.savez("tr/twolayersN.npz", **base, **fc2)
for name, shape in [("attn_n0", (S,1,2,0,4)), ("attn_dh0", (S,1,2,8,0)), ("attn_b0", (S,0,2,8,4))]:
    a = np.zeros(shape, "f4")
    np.savez("tr/" + name, **base, **{f"attn/blk.attn/{c}": a for c in "qkv"})
def npy(a): b = io.BytesIO(); np.save(b, a); return b.getvalue()
with zipfile.ZipFile("tr/nonnpy_x.npz", "w") as z:
    z.writestr("format.npy", npy(np.array("dstar-trace/1")))
    z.writestr("steps.npy", npy(np.array(3)))
    z.writestr("linear/blk.fc1/x.npy", b"garbage"); z.writestr("linear/blk.fc1/weight.npy", npy(w))
with zipfile.ZipFile("tr/nonnpy_steps.npz", "w") as z:
    z.writestr("format.npy", npy(np.array("dstar-trace/1"))); z.writestr("steps.npy", b"3")
with zipfile.ZipFile("tr/nonnpy.npz", "w") as z:
    z.writestr("format.npy", b"not npy"); z.writestr("steps.npy", b"xx")
open("tr/trunc_half.npz", "wb").write(open("tr/valid.npz", "rb").read()[:1000])
open("hugetok.toml", "w").write('preset="tiny"\nmax_tokens=1048576\n')
open("hs.toml", "w").write('preset="tiny"\nattn_slots=4096\n')
open("f000.toml", "w").write('preset="tiny"\n'); os.chmod("f000.toml", 0)
open("f", "w").close()
for d in ("chk", "chk2", "chk3"):      # stand-in dstar checkouts for `dstar results`
    os.makedirs(d + "/docs/results", exist_ok=True)
    open(d + "/pyproject.toml", "w").write('[project]\nname = "dstar"\n')
open("chk/docs/results/analyze.json", "w").write("{")
open("chk2/docs/results/analyze.json", "w").write('{"command": "x"}')
open("chk3/docs/results/bench_golden.json", "w").write(
    '{"command":"x","commit":"c","date":"d","result":{"foo":1}}')
'''

# SIGTERM to dstar alone while it waits on a tool that has children of its own (make's
# compilers, vvp): the real compile takes minutes, so the command is a fake one.
SIGTERM = r'''
import os, signal, subprocess, sys, time
pidfile = os.path.abspath("child_TOOL.pid")    # one per variant: none left from another
script = f"""
import subprocess, sys
from dstar import cli
def tool(args):
    if "TOOL" == "make":    # a tool with children of its own (make and its compilers)
        subprocess.run(["sh", "-c", "sleep 300 & echo $! > {pidfile}; wait"])
    else:                   # a tool alone (vvp)
        p = subprocess.Popen(["sleep", "300"])
        open("{pidfile}", "w").write(str(p.pid))
        p.wait()
    return 0
cli.cmd_run = tool
sys.exit(cli.main(["run"] + sys.argv[1:]))
"""
p = subprocess.Popen([sys.executable, "-c", script] + "RUNARGS".split(), stderr=subprocess.PIPE,
                     text=True)
for _ in range(600):
    if os.path.isfile(pidfile) and open(pidfile).read().strip():
        break
    time.sleep(0.05)
kid = int(open(pidfile).read())
p.send_signal(signal.SIGTERM)
_, e = p.communicate(timeout=60)
def alive(pid):
    try:
        s = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return s[s.rindex(")") + 2] != "Z"
for _ in range(100):
    if not alive(kid):
        break
    time.sleep(0.05)
orphan = alive(kid)
if orphan:
    os.kill(kid, signal.SIGKILL)
print(f"status {p.returncode}, {e.strip()!r}, tool's child {'left running' if orphan else 'ended'}")
'''

# R31: a cached dstar.v damaged after a run; the generation replaced by a quick fake.
DAMAGED = r'''
import json
from pathlib import Path
from dstar import run
from dstar.config import load_config
cfg = load_config(None, "tiny")
def fake(cfg):
    return ({"dstar.v": "module dstar; endmodule\n" * 1000,
             "params.json": json.dumps({"accelerator": {"config": cfg.hardware()}})}, {})
run.build_accelerator = fake
d = Path("runfolder")
run._generate(cfg, d, print)
v = d / "dstar.v"; v.write_bytes(v.read_bytes()[:100])
run._generate(cfg, d, print)
print("dstar.v whole again:", v.read_text() == fake(cfg)[0]["dstar.v"])
'''

# B28: Ctrl-C while the trace cache is written (np.savez interrupted half way).
CACHE_INT = r'''
import numpy as np
from pathlib import Path
from dstar.sim import traces
real = np.savez
def half(f, **arrays):
    f.write(b"PK\x03\x04" + b"x" * 1000)
    raise KeyboardInterrupt
traces.np.savez = half
p = Path("cache/traces/x.npz")
try:
    traces.write_cache(p, xs=np.zeros((4, 4)))
except KeyboardInterrupt:
    pass
print("files left:", sorted(q.name for q in p.parent.iterdir()))
traces.np.savez = real
print("re-read:", traces.read_cache(p, "xs"))
'''

# O34: a Ctrl-C whose KeyboardInterrupt Python drops in a finalizer (as in Amaranth's
# MustUse.__del__) during `dstar generate` over an existing folder; the build is a quick fake.
SWALLOWED = r'''
import os, signal, sys
from pathlib import Path
from dstar.cli import main
from dstar.hw import generate
def swallowed():
    try:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):
            pass
    except KeyboardInterrupt:
        pass
def build(cfg, attention=True, accelerator=False):
    swallowed()
    return {"dstar_linear.v": "// new\n", "params.json": "{}\n"}, {}
generate.build = build
out = Path("g34"); out.mkdir(); (out / "dstar_linear.v").write_text("// old\n")
code = main(["generate", "--preset", "tiny", "-o", str(out)])
print("status", code, "folder", sorted(p.name for p in out.iterdir()),
      (out / "dstar_linear.v").read_text().strip())
'''

TH = ",".join(str(round(0.02 * i, 2)) for i in range(1, 51))
TA = ",".join(map(str, range(50)))
BIG = ",".join(map(str, range(1000)))


def ro(setup: str, cmd: str) -> str:
    """``cmd`` with ``ro`` a read-only tmpfs holding what ``setup`` wrote in it."""
    return ("unshare -m --propagation private bash -c 'mkdir -p ro && mount -t tmpfs -o size=1m "
            f"tmpfs ro && {setup or 'true'} && mount -o remount,ro ro && {cmd}'")


def full(cmd: str) -> str:
    """``cmd`` with ``small`` a 64 kB tmpfs; lists what it holds afterwards."""
    return ("unshare -m --propagation private bash -c 'mkdir -p small && mount -t tmpfs -o "
            f"size=64k tmpfs small && {{ {cmd}; }}; rc=$?; find small -type f; exit $rc'")


def j(r: Result) -> dict:
    return json.loads(r.out)


#: A sample of probe 3's clear errors, rerun to show they still hold: (id, what, command, the
#: bad value the line must name).
CLEAR_SAMPLE = [
    ("O12", "config is a folder", "mkdir -p adir.toml && dstar config --config adir.toml",
     "adir.toml"),
    ("O14", "binary config", "printf '\\x86\\x00' > bin.toml && dstar config --config bin.toml",
     "bin.toml"),
    ("O17", "preset = [\"tiny\"]", "echo 'preset = [\"tiny\"]' > pl.toml && "
     "dstar config --config pl.toml", "['tiny']"),
    ("O19", "--preset ''", "dstar config --preset ''", "''"),
    ("O24", "-o /proc/x", "dstar generate --preset tiny -o /proc/x", "/proc"),
    ("O26", "-o /dev/null", "dstar generate --preset tiny -o /dev/null", "/dev/null"),
    ("O27", "-o under a file", "dstar generate --preset tiny -o f/sub", "'f'"),
    ("O35", "analyze --output a folder", f"mkdir -p od && {A} --output od", "'od'"),
    ("O36", "--png in a missing folder", f"{A} --png /nonexistent/p.png", "/nonexistent"),
    ("O42", "trace steps 3.9", "python -c 'import numpy as np; "
     "z = dict(np.load(\"tr/valid.npz\")); z[\"steps\"] = np.array(3.9); "
     "np.savez(\"tr/s39.npz\", **z)' && "
     "dstar analyze --preset tiny --trace tr/s39.npz", "float64"),
    ("O63", "--layers nosuch.layer", "dstar trace --preset tiny --samples 1 --steps 1 "
     "--layers nosuch.layer -o t.npz", "nosuch.layer"),
    ("O65", "trace -o under a file", "dstar trace --preset tiny --samples 1 --steps 1 -o f/x.npz",
     "'f'"),
    ("R3", "--tokens 100000", f"dstar run {T} --tokens 100000", "100000"),
    ("R5", "--block 6", f"dstar run {T} --block 6", "6"),
    ("R9", "--steps 21", f"dstar run {T} --steps 21", "21"),
    ("R11", "--sim bogus", f"dstar run {T} --sim bogus", "'bogus'"),
    ("R13", "wrong head size", f"dstar run {T} --set head_dim=16", "head_dim = 16"),
    ("R15", "int8 datapath", f"dstar run {T} --set datapath=int8", "int8"),
    ("S1", "results --run bogus", "dstar results --run bogus", "'bogus'"),
    ("W3", "--sweep nope=1,2", f"{A} --sweep nope=1,2", "'nope'"),
    ("W4", "--sweep field twice", f"{A} --sweep theta=0.5 --sweep theta=0.7", "'theta'"),
    ("W11", "--sweep tau=-1", f"{A} --sweep tau=-1", "-1"),
    ("W16", "--sweep refine_at=0", f"{A} --sweep refine_at=0", "0"),
    ("W17", "--sweep linears=foo", f"{A} --sweep linears=foo", "'foo'"),
    ("W21", "--plot without --sweep", f"{A} --plot p.png", "--plot"),
    ("W22", "--sweep with --trace", f"{A} --sweep theta=0.5 --trace tr/valid.npz", "--trace"),
    ("W27", "--plot ''", f"{A} --sweep theta=0.5 --plot ''", "''"),
    ("L7", "--set workload=bogus", "dstar config --set workload=bogus", "'bogus'"),
    ("L9", "--set and --workload", "dstar config --set workload=photos --workload digits",
     "workload"),
    ("L11", "--workload with --trace",
     "dstar analyze --workload photos --trace tr/valid.npz", "--workload"),
    ("G2", "head_dim 31", "dstar generate --preset tiny --accelerator --set head_dim=31 -o x",
     "head_dim=31"),
    ("G4", "softmax_lanes 3", "dstar generate --preset tiny --accelerator --set softmax_lanes=3 "
     "-o x", "3"),
    ("G8", "--datapath dense --accelerator", "dstar generate --preset tiny --set datapath=dense "
     "--accelerator -o x", "dense"),
    ("G10", "refine_max 2", "dstar generate --preset tiny --set refine_max=2 -o x",
     "refine_max=2"),
    ("B1", "bench golden --preset bogus", "dstar bench golden --preset bogus", "'bogus'"),
    ("B9", "cycles --layers bogus", "dstar bench cycles --preset tiny --layers bogus", "'bogus'"),
    ("B11", "cycles --lane-rotation 3", "dstar bench cycles --preset tiny --lane-rotation 3",
     "3"),
    ("B14", "cycles --steps 1000000", "dstar bench cycles --preset tiny --steps 1000000",
     "1000000"),
    ("B16", "attention --heads 9", "dstar bench attention --preset tiny --heads 9", "9"),
    ("B18", "attention --theta 2", "dstar bench attention --preset tiny --theta 2", "2.0"),
    ("B19", "attention --theta nan", "dstar bench attention --preset tiny --theta nan", "nan"),
    ("C1", "--set tau", "dstar config --set tau", "'tau'"),
    ("C4", "--set tau=1e3", "dstar config --set tau=1e3", "'1e3'"),
    ("C7", "--set packing=dense", "dstar config --set packing=dense", "dense"),
    ("C9", "--set tau twice", "dstar config --set tau=1 --set tau=2", "'tau'"),
    ("C12", "--set theta=-0.0", "dstar config --set theta=-0.0", "-0.0"),
    ("C17", "--set preset=tiny", "dstar config --set preset=tiny", "'preset'"),
    ("C24", "--set theta=1/2", "dstar config --set theta=1/2", "'1/2'"),
    ("T5", "empty trace file", ": > tr/zero.npz && dstar analyze --preset tiny --trace tr/zero.npz",
     "zero.npz"),
    ("T30", "extra readme.txt member", "cp tr/valid.npz tr/extra.npz && python -c 'import "
     "zipfile; z = zipfile.ZipFile(\"tr/extra.npz\", \"a\"); z.writestr(\"readme.txt\", "
     "\"hi\"); z.close()' && dstar analyze --preset tiny --trace tr/extra.npz", "readme.txt"),
]


def cli_cases() -> list[Case]:
    exists = os.path.exists
    return [
        # old cases still not OK in probe 3
        case("O9", "max_tokens 2^20 (tiny)", "dstar config --config hugetok.toml", "unclear",
             err("max_tokens")),
        case("O11", "attn_slots 4096: generate announces itself (SIGINT after 25 s)",
             "timeout -s INT 25 dstar generate --config hs.toml -o hs", "unclear",
             ok(lambda r: r.rc in (0, 124, 130) and "memory words" in r.err and (
                 r.rc == 0 or not exists("hs"))), timeout=90),
        case("O16", "unreadable config (read as user nobody)",
             "setpriv --reuid=65534 --regid=65534 --clear-groups dstar config --config f000.toml",
             "untested", err("f000.toml")),
        case("O20", "unknown subcommand flag", "dstar config --bogus", "clear (cosmetic)",
             err("dstar config: error: unrecognized arguments: --bogus")),
        case("O22", "train --help names itself", "dstar train --help | head -1",
             "unclear (cosmetic)", ok(lambda r: r.out.startswith("usage: dstar train"))),
        case("O29", "-o ''", "dstar generate --preset tiny -o ''", "unclear", err("''")),
        case("O34", "Ctrl-C Python swallows (fake quick build)", "python swallowed.py",
             "unclear", ok(lambda r: "status 130" in r.out and "// old" in r.out)),
        case("O52", "zip of non-npy members", "dstar analyze --preset tiny --trace tr/nonnpy.npz",
             "traceback", err("format")),
        case("O57", "two layers with different N",
             "dstar analyze --preset tiny --trace tr/twolayersN.npz --json --quiet | python -c "
             "'import json, sys; print(json.load(sys.stdin)[\"rows_per_layer\"])'",
             "unclear", ok(lambda r: r.out.strip() == "{'blk.fc1': 8, 'blk.fc2': 4}")),
        case("O68", "analyze --output a.json names its own grid",
             f"{A} --steps 1 --output a.json && ls a_samples.png", "silent wrong",
             ok(lambda r: r.rc == 0 and "a_samples.png" in r.out)),
        # samples of old cases that were OK or clear errors
        case("O13", "--config ''", "dstar config --config ''", "clear error", err("''")),
        case("O25", "-o an existing file", "dstar generate --preset tiny -o f", "clear error",
             err("'f'")),
        case("O49", "trace with N = 0", "dstar analyze --preset tiny --trace tr/n0.npz",
             "clear error", err("(3, 0, 32)")),
        case("O41", "stdout full", "dstar config > /dev/full", "clear error",
             err("No space left")),
        # dstar run
        case("R1", "--tokens 0", f"dstar run {T} --tokens 0", "clear error", err("0")),
        case("R2", "--tokens -1", f"dstar run {T} --tokens -1", "clear error (cosmetic: "
             "said >= 0)", err("-1", ">= 1")),
        case("R17", "unbuildable: refine_max 1", f"dstar run {T} --set refine_max=1 --tokens 1",
             "clear error (spurious progress line)",
             err("refine_max", extra=lambda r: "generating" not in r.err)),
        case("R12", "memories too small", "dstar run --preset tiny", "clear error",
             err("max_k")),
        case("R19", "--build-dir is a file", f"dstar --build-dir f run {RUN}", "traceback",
             err("/f'"), timeout=60),
        case("R20", "DSTAR_BUILD_DIR is a file", f"DSTAR_BUILD_DIR=$PWD/f dstar run {RUN}",
             "traceback", err("/f"), timeout=60),
        case("R21", "build folder on a read-only file system",
             ro("", f"dstar --build-dir ro/b run {RUN}"), "traceback", err("ro/b"), timeout=60,
             mounts=True),
        case("R28", "SIGTERM to dstar alone during the compile (fake: a tool whose child "
             "sleeps, as make's compilers)", "python sigterm_make.py", "unclear (orphans)",
             ok(lambda r: "status 143" in r.out and "terminated" in r.out and
                "ended" in r.out)),
        case("R29", "SIGTERM to dstar alone during the simulation (fake: a tool that sleeps, "
             "as vvp)", "python sigterm_vvp.py", "unclear (orphans)",
             ok(lambda r: "status 143" in r.out and "terminated" in r.out and
                "ended" in r.out)),
        case("R30", "two runs of one configuration at once (the first stopped after the "
             "second's answer)",
             f"dstar --build-dir b run {RUN} >A.out 2>A.err & A=$!; "
             "for i in $(seq 600); do [ -e b/run/*/.lock ] && break; sleep 0.1; done; "
             f"dstar --build-dir b run {T} --sim icarus --tokens 2 --steps 1; rc=$?; "
             "kill -INT $A; wait $A; exit $rc", "silent wrong",
             err("another dstar command is using")),
        case("R31", "damaged cached dstar.v (fake quick generation)", "python damaged.py",
             "traceback", ok(lambda r: r.out.count("generating") == 2 and
                             "whole again: True" in r.out)),
        case("R32", "WAVES=false",
             "WAVES=false python -c 'from dstar.sim.simulators import waves_requested as w; "
             "print(w())'", "unclear (minor)", ok(lambda r: r.out.strip() == "False")),
        # dstar results
        case("S3", "folder without docs/", "mkdir -p e && cd e && dstar results", "unclear",
             err("not inside a dstar checkout")),
        case("S4", "folder with an empty docs/", "mkdir -p d/docs && cd d && dstar results",
             "unclear", err("not inside a dstar checkout",
                            extra=lambda r: not exists("d/docs/results.md"))),
        case("S5", "another project's docs/results.md",
             "mkdir -p o/docs && echo '# My results' > o/docs/results.md && cd o && "
             "dstar results", "silent wrong",
             err("not inside a dstar checkout", extra=lambda r: open(
                 "o/docs/results.md").read() == "# My results\n")),
        case("S6", "malformed stored JSON", "cd chk && dstar results", "traceback",
             err("analyze.json")),
        case("S7", "stored JSON without result", "cd chk2 && dstar results", "traceback",
             err("analyze.json")),
        case("S8", "stored result of the wrong shape", "cd chk3 && dstar results", "traceback",
             err("bench_golden.json")),
        case("S10", "read-only checkout",
             ro("mkdir -p ro/docs/results && cp chk3/pyproject.toml ro/",
                "cd ro && dstar results"), "unclear", err("results.md"), mounts=True),
        # sweeps
        case("W1", "--sweep theta=", f"{A} --sweep theta=", "clear error", err("'theta='")),
        case("W9", "--sweep theta=nan", f"{A} --sweep theta=nan", "clear error", err("nan")),
        case("W28", "2500-point grid (SIGINT after 15 s)",
             f"timeout -s INT 15 {A} --sweep theta={TH} --sweep tau={TA}", "unclear",
             ok(lambda r: "2500" in r.err.replace(",", "")), timeout=60),
        case("W29", "10^6-point grid", f"{A} --sweep tau={BIG} --sweep refresh_attn={BIG}",
             "hang", err("1000000"), timeout=60),
        case("W30", "--png with --trace",
             "dstar analyze --preset tiny --trace tr/valid.npz --png x.png", "unclear",
             err("--png")),
        # generate
        case("G1", "attn_slots 0", "dstar generate --preset tiny --accelerator "
             "--set attn_slots=0 -o x", "clear error", err("attn_slots", "0")),
        case("G15", "-o . in an empty folder", "mkdir -p e15 && cd e15 && "
             "dstar generate --preset tiny -o .", "unclear",
             err("'.'", extra=lambda r: os.listdir("e15") == [])),
        case("G16", "no lock file left beside the folder",
             "dstar generate --preset tiny --set datapath=dense -o g16 >/dev/null && "
             "ls -a | grep g16",
             "unclear (cosmetic)", ok(lambda r: r.rc == 0 and "g16" in r.out and
                                     ".g16.lock" not in r.out)),
        # bench
        case("L6", "bench efficiency --workload photos",
             "dstar bench efficiency --workload photos", "clear error (doc mismatch)",
             err("--workload")),
        case("B8", "cycles --blocks 99", "dstar bench cycles --preset tiny --blocks 99",
             "clear error", err("99")),
        case("B27", "truncated trace cache, run again",
             f"{BENCH} >/dev/null && for f in build/traces/*.npz; do head -c 1000 $f >x; "
             f"mv x $f; done && {BENCH}", "traceback", ok(lambda r: r.rc == 0)),
        case("B28", "Ctrl-C while the cache is written (np.savez interrupted half way)",
             "python cache_int.py", "half-written",
             ok(lambda r: "files left: []" in r.out and "re-read: None" in r.out)),
        case("B29", "DSTAR_BUILD_DIR is a file", f"DSTAR_BUILD_DIR=$PWD/f {BENCH}", "traceback",
             err("/f")),
        case("B30", "build folder on a full disk",
             full(f"DSTAR_BUILD_DIR=small/bd {BENCH}"), "unclear", err(
                 "No space left", "small/bd", extra=lambda r: ".npz" not in r.out),
             mounts=True),
        case("B31", "read-only working folder", ro("", f"cd ro && {BENCH}"), "traceback",
             err("ro/build"), mounts=True),
        case("B32", "--build-dir /dev/null", BENCH.replace("dstar ", "dstar --build-dir "
             "/dev/null ", 1), "traceback", err("/dev/null")),
        case("B33", "--build-dir ''", BENCH.replace("dstar ", "dstar --build-dir '' ", 1),
             "unclear (minor)", err("--build-dir", "''")),
        # config
        case("C5", "--set packing=COMPACT", "dstar config --set packing=COMPACT", "clear error",
             err("'COMPACT'")),
        case("C28", "max_tokens 256 on tiny", "dstar config --preset tiny --set max_tokens=256",
             "unclear", err("max_tokens")),
        # streams
        case("E1", "stdout closed, config", "dstar config --preset tiny >&-", "traceback",
             err("standard output is closed")),
        case("E2", "stdout closed, analyze",
             "dstar analyze --preset tiny --trace tr/valid.npz --quiet >&-", "traceback",
             err("standard output is closed")),
        case("E3", "stdout closed, generate", "dstar generate --preset tiny -o g3 >&-",
             "traceback", err("standard output is closed", extra=lambda r: not exists("g3"))),
        case("E10", "--help > /dev/full", "dstar --help > /dev/full", "unclear (cosmetic)",
             err("No space left")),
        case("E17", "--png /dev/full --output r.json",
             "dstar analyze --preset tiny --samples 1 --steps 1 --quiet --png /dev/full "
             "--output r.json", "half-written",
             err("/dev/full", extra=lambda r: exists("r.json") and "'r.json'" in r.err)),
        case("E17b", "--plot /dev/full --output s.json (a 1-point sweep)",
             f"{A} --sweep theta=0.5 --plot /dev/full --output s.json", "(new)",
             err("/dev/full", extra=lambda r: exists("s.json") and "'s.json'" in r.err)),
        # traces
        case("T1", "truncated trace", "dstar analyze --preset tiny --trace tr/trunc_half.npz",
             "clear error", err("trunc_half.npz")),
        case("T32", "big-endian x (a sample of the OK cases)",
             "python -c 'import numpy as np; z = dict(np.load(\"tr/valid.npz\")); "
             "z[\"linear/blk.fc1/x\"] = z[\"linear/blk.fc1/x\"].astype(\">f4\"); "
             "np.savez(\"tr/be.npz\", **z)' && dstar analyze --preset tiny --trace tr/be.npz "
             "--json --quiet >/dev/null", "OK", ok(lambda r: r.rc == 0)),
        case("C14", "--set tau=1_0", "dstar config --preset tiny --set tau=1_0 | grep -w tau",
             "OK", ok(lambda r: "10" in r.out)),
        case("C13", "--set tau=\u0663 (Arabic-Indic 3)", "dstar config --preset tiny "
             "--set tau=\u0663 | grep -w tau", "OK", ok(lambda r: '"tau": 3,' in r.out)),
        case("C20", "--set k-tile=32", "dstar config --preset tiny --set k-tile=32 | "
             "grep -w k_tile", "OK", ok(lambda r: '"k_tile": 32' in r.out)),
        case("C22", "--set steps=+5", "dstar config --preset tiny --set steps=+5 | grep -w steps",
             "OK", ok(lambda r: '"steps": 5' in r.out)),
        case("O40", "stdout to a closed pipe", "dstar config --preset tiny | head -1", "OK",
             ok(lambda r: r.rc == 0 and r.out.strip() == "{" and r.err == "")),
        case("E9", "--help with stdout closed (was: the help on stderr)", "dstar --help >&-",
             "OK", err("standard output is closed")),
        case("E12", "stdin closed", "dstar config --preset tiny <&- >/dev/null", "OK",
             ok(lambda r: r.rc == 0 and r.err == "")),
        case("T12", "NaN in x", "dstar analyze --preset tiny --trace tr/x_nan.npz",
             "clear error", err("linear/blk.fc1/x")),
        case("T17", "attention N = 0", "dstar analyze --preset tiny --trace tr/attn_n0.npz",
             "traceback", err("attn/blk.attn/")),
        case("T18", "attention Dh = 0", "dstar analyze --preset tiny --trace tr/attn_dh0.npz",
             "traceback", err("attn/blk.attn/")),
        case("T19", "attention B = 0", "dstar analyze --preset tiny --trace tr/attn_b0.npz",
             "traceback", err("attn/blk.attn/")),
        case("T28", "x member not an .npy", "dstar analyze --preset tiny --trace "
             "tr/nonnpy_x.npz", "traceback", err("linear/blk.fc1/x")),
        *(case(id, what + " (a sample of the clear errors)", cmd, "clear error", err(name))
          for id, what, cmd, name in CLEAR_SAMPLE),
        case("T29", "steps member not an .npy", "dstar analyze --preset tiny --trace "
             "tr/nonnpy_steps.npz", "traceback", err("steps")),
    ]


# ---- API cases: one process per group, each case an expression after the group's prelude ------

PRELUDES = {
    "golden": """
import numpy as np
from dstar.golden import attention as A
from dstar.golden.encoder import encode
from dstar.golden.quant import token_lattice, w8a8_linear, quantize_weights
from dstar.golden.softmax import logit_multiplier
wq, sw = quantize_weights(np.ones((2, 16)))
m, sh = logit_multiplier(np.array(0.01), 6); z = np.zeros((8, 0), np.int64)
""",
    "accel": """
import asyncio, numpy as np
from dstar.config import load_config
from dstar.hw.generate import accelerator_manifest
from dstar.sim import accel_io as A
from dstar.sim.layer_io import unpack_named, unpack
man = accelerator_manifest(load_config(None, "tiny", encoding="nibble"))
lay = man["layouts"]["command"]
fld = lambda w, k: unpack_named(w, lay)[k]
st = A.LinearStep(man, 32, 16, 2); W = man["layouts"]["WEIGHTS"]; TG = man["layouts"]["TARGET"]
first = lambda d, l: unpack(list(d.values())[0], l)[:2]
at = A.AttentionStep(man, 8); KT = man["layouts"]["KT"]
class IO:                       # a stream that is always valid and ready, payload 0
    v = {"dout__valid": 1, "dout__payload": 0, "cmd__ready": 1, "din__ready": 1}
    def __iter__(s):
        async def tick(): pass
        return iter((lambda n, x: None, lambda n: s.v.get(n, 0), tick))
io = tuple(IO())
""",
    "host": """
import numpy as np
from dstar.config import load_config
from dstar.golden.dit import DiT
from dstar.golden.softmax import logit_multiplier
from dstar.sim.host import BlockHost, GoldenEngine, run_sync
cfg = load_config(None, "tiny").replace(max_k=512, max_m=512); model = DiT.bundled()
r = np.random.default_rng(0); h = r.standard_normal((2, 4, 128)).astype("f4")
sc = r.standard_normal((2, 128)).astype("f4")
step = lambda h, sc, i=0, s=0: run_sync(BlockHost(cfg, model, GoldenEngine(cfg)).step(i, h, sc, s))
host = BlockHost(cfg, model, GoldenEngine(cfg)); run_sync(host.step(0, h, sc, 0))
g = GoldenEngine(cfg); wq = r.integers(-127, 128, (32, 16))
run_sync(g.linear("p", wq, np.ones((2, 32), np.int64), True))
q = r.integers(-127, 128, (8, 32)); mm, ss = logit_multiplier(np.full(8, 0.01), 6)
""",
    "capture": """
import torch, torch.nn.functional as F
from torch import nn
from dstar.capture import TraceCapture
class Block(nn.Module):
    def __init__(s, d=32): super().__init__(); s.qkv = nn.Linear(d, 3 * d); s.fc = nn.Linear(d, d)
    def forward(s, x):
        b, n, d = x.shape
        q, k, v = s.qkv(x).reshape(b, n, 3, 2, d // 2).permute(2, 0, 3, 1, 4)
        return x + s.fc(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d))
class Toy(nn.Module):
    def __init__(s): super().__init__(); s.blocks = nn.ModuleList([Block(), Block()])
    def forward(s, x):
        for b in s.blocks: x = b(x)
        return x
model, x = Toy(), torch.randn(2, 8, 32)
def closed():
    c = TraceCapture(model)
    with c:
        for t in range(2): c.next_step(t); model(x)
    c.close(); return c.save("d.npz")
def late():
    e = TraceCapture(model, spill_dir="/nonexistent/spill")
    with e:
        e.next_step(0); model(x); e.next_step(1)
""",
    "K20": """
import torch
exec(open("capture_prelude.py").read())
cap = TraceCapture(model)
def nested():
    with cap:
        with cap:
            cap.next_step(0); model(x)
""",
    "K21": """
exec(open("capture_prelude.py").read())
a, b = TraceCapture(model), TraceCapture(model)
a.__enter__(); b.__enter__(); a.__exit__(None, None, None); b.__exit__(None, None, None)
""",
}

TRUE = ok(lambda r: r.out == "True")


def api(id, what, expr, then, expect, group) -> Case:
    return case(id, what, expr, then, expect, group=group)


def api_cases() -> list[Case]:
    g, a, h, k = "golden", "accel", "host", "capture"
    lin = 'A.command(man, "RUN_LINEAR", '
    load = 'A.command(man, "LOAD", mem="WEIGHTS", count=1, '
    return [
        api("P1", "encode of an empty difference", "encode(np.zeros((0, 16), np.int64), 16, 7, "
            "0) is not None", "OK", TRUE, g),
        api("P15", "quantize_weights of +-1e308", "quantize_weights(np.array([[1e308, -1e308, "
            "1.0]]))[0].ravel().tolist() == [127, -127, 0]", "OK", TRUE, g),
        api("P2", "encode of floats", "encode(np.zeros(16), 16, 7, 0)", "clear error",
            err("float64"), g),
        api("P12", "token_lattice extra_bits -1", "token_lattice(np.ones((1, 2)), -1)",
            "unclear", err("-1"), g),
        api("P13", "quantize_weights 1-D", "quantize_weights(np.ones(4))", "clear error",
            err("(4,)"), g),
        api("P17", "w8a8_linear K 8 for weights of K 16", "w8a8_linear(np.zeros((1, 8)), wq, sw)",
            "unclear", err("8", "16"), g),
        api("P18", "quantize_per_token NaN", "A.quantize_per_token(np.array([[np.nan, 1.0]]))",
            "silent wrong", err("nan"), g),
        api("P19", "quantize_per_token inf", "A.quantize_per_token(np.array([[np.inf, 1.0]]))",
            "silent wrong", err("inf"), g),
        api("P20", "quantize_per_token empty axis", "A.quantize_per_token(np.zeros((1, 0)))",
            "unclear", err("(1, 0)"), g),
        api("P21", "quantize_per_head NaN", "A.quantize_per_head(np.array([[np.nan, 1.0]]))",
            "silent wrong", err("nan"), g),
        api("P22", "quantize_on NaN",
            "A.quantize_on(np.array([[[np.nan, 1.0]]]), np.array([1.0]))", "silent wrong",
            err("nan"), g),
        api("P23", "quantize_on step 0", "A.quantize_on(np.array([[[2.0, 1.0]]]), "
            "np.array([0.0]))", "silent wrong", err("0"), g),
        api("P30", "attention_head Dh = 0", "A.attention_head(z, z, z, m, sh)", "unclear",
            err("(8, 0)"), g),
        api("A1", "unknown opcode", 'A.command(man, "BOGUS")', "clear error", err("BOGUS"), a),
        api("A3", "LOAD addr=-1", load + 'addr=-1)', "silent wrong", err("-1"), a),
        api("A4", "LOAD addr=2**40", load + 'addr=2**40)', "silent wrong", err(str(2**40)), a),
        api("A5", "LOAD addr=1024 (the depth)", load + 'addr=1024)', "silent wrong",
            err("1024"), a),
        api("A6", "LOAD addr=1.7", load + 'addr=1.7)', "silent wrong", err("1.7"), a),
        api("A9", "misspelled ntokens=", lin + 'ntokens=4, n_kt=1, n_mt=1, key=1)',
            "silent wrong", err("ntokens"), a),
        api("A10", "n_tokens=64 in a 6-bit field", lin + 'n_tokens=64, n_kt=1, n_mt=1, key=1)',
            "silent wrong", err("64"), a),
        api("A11", "slot 4 of 4", 'A.command(man, "RUN_ATTENTION", slot=4, n_tokens=8, '
            'theta_q=1, refresh=2)', "silent wrong", err("slot", "4"), a),
        api("A12", "CLEAR_SLOTS with an argument", 'A.command(man, "CLEAR_SLOTS", addr=1)',
            "clear error", err("addr"), a),
        api("A13", "LOAD mem=99", 'A.command(man, "LOAD", mem=99, addr=0, count=1)',
            "silent wrong", err("99"), a),
        api("A16", "weights 1.7", "st.weight_words(np.full((32, 16), 1.7))", "silent wrong",
            err("1.7"), a),
        api("A17", "weights 2**63-1", "st.weight_words(np.full((32, 16), 2**63 - 1, np.int64))",
            "silent wrong", err(str(2**63 - 1)), a),
        api("A18", "weights 200", "st.weight_words(np.full((32, 16), 200))", "silent wrong",
            err("200"), a),
        api("A19", "weights NaN", "st.weight_words(np.full((32, 16), np.nan))", "silent wrong",
            err("nan"), a),
        api("A20", "weights (48, 16) for K 32", "st.weight_words(np.ones((48, 16), np.int64))",
            "unclear", err("(48, 16)"), a),
        api("A21", "weights (16, 16) for K 32", "st.weight_words(np.ones((16, 16), np.int64))",
            "silent wrong", err("(16, 16)"), a),
        api("A22", "weights 1-D", "st.weight_words(np.ones(16, np.int64))", "unclear",
            err("(16,)"), a),
        api("A23", "weights of strings", 'st.weight_words(np.full((32, 16), "a"))', "unclear",
            err("<U1"), a),
        api("A24", "(1, K) target for N = 2", 'st.img.row_words(np.ones((1, 32), np.int64), '
            '"target")', "silent wrong", err("(1, 32)"), a),
        api("A25", "(2, 16) target for K = 32", 'st.img.row_words(np.ones((2, 16), np.int64), '
            '"target")', "unclear", err("(2, 16)"), a),
        api("A26", "target 2**40", 'st.img.row_words(np.full((2, 32), 2**40), "target")',
            "silent wrong", err(str(2**40)), a),
        api("A27", "target 40000", 'st.img.row_words(np.full((2, 32), 40000), "target")',
            "silent wrong", err("40000"), a),
        api("A28", "target 1.7", 'st.img.row_words(np.full((2, 32), 1.7), "target")',
            "silent wrong", err("1.7"), a),
        api("A29", "target NaN", 'st.img.row_words(np.full((2, 32), np.nan), "target")',
            "silent wrong", err("nan"), a),
        api("A30", "y int64 max", "st.y_words(np.full((2, 16), 2**63 - 1))", "silent wrong",
            err(str(2**63 - 1)), a),
        api("A31", "y_from({})", "st.y_from({})", "unclear", err("0"), a),
        api("A34", "K 1.7", "at.k_words(np.full((8, 32), 1.7))", "silent wrong", err("1.7"), a),
        api("A35", "K 200", "at.k_words(np.full((8, 32), 200))", "silent wrong", err("200"), a),
        api("A36", "K NaN", "at.k_words(np.full((8, 32), np.nan))", "silent wrong",
            err("nan"), a),
        api("A38", "Q NaN", "at.img.q_words(np.full((8, 32), np.nan))", "silent wrong",
            err("nan"), a),
        api("A40", "m, sh of 2 for N = 8", "at.img.ms_words(np.zeros(2), np.zeros(2))",
            "unclear", err("(2,)"), a),
        api("A44", "receive(n=0)", 'asyncio.run(A.receive(io, "dout", 0)) == []', "OK", TRUE,
            a),
        api("A45", "receive(n=-1)", 'asyncio.run(A.receive(io, "dout", -1))', "silent wrong",
            err("-1"), a),
        api("A46", "load address 5000 (depth 1024)", 'asyncio.run(A.load(io, man, "WEIGHTS", '
            '{5000: 1}))', "silent wrong", err("5000"), a),
        api("H1", "a block step", "step(h, sc).shape == (2, 4, 128)", "OK", TRUE, h),
        api("H4", "h x 1e30 (the residual dominates: out = h x 1e30 to float32 precision)",
            "bool(np.allclose(step(h * 1e30, sc), h * 1e30, rtol=1e-6))", "silent wrong (minor)",
            TRUE, h),
        api("H7", "h of D = 127", "step(h[..., :127], sc)", "unclear", err("127"), h),
        api("H8", "h 2-D", "step(h[0], sc)", "unclear", err("(4, 128)"), h),
        api("H9", "h with N = 0", "step(h[:, :0], sc)", "unclear", err("(2, 0, 128)"), h),
        api("H12", "block 99", "step(h, sc, i=99)", "unclear", err("99"), h),
        api("H13", "block -1", "step(h, sc, i=-1)", "unclear", err("-1"), h),
        api("H15", "conditioning of batch 1 for h of batch 2", "step(h, sc[:1])",
            "silent wrong", err("(1, 128)"), h),
        api("H16", "N changes between steps of one host", "run_sync(host.step(0, h[:, :3], sc, 1))",
            "unclear", err("3"), h),
        api("H17", "target 40000 > target_max", 'run_sync(g.linear("l", wq, np.full((2, 32), '
            '40000), True))', "silent wrong", err("40000"), h),
        api("H20", "weights 1000 (not INT8)", 'run_sync(g.linear("m", np.full((32, 16), 1000), '
            'np.ones((2, 32), np.int64), True))', "silent wrong", err("1000"), h),
        api("H21", "weights of another K", 'run_sync(g.linear("n", np.ones((16, 16), np.int64), '
            'np.ones((2, 32), np.int64), True))', "unclear", err("16", "32"), h),
        api("H23", "rows change on a non-key step", 'run_sync(g.linear("p", wq, np.ones((3, 32), '
            'np.int64), False))', "unclear", err("3"), h),
        api("H26", "m, sh of length 2 for N = 8", "run_sync(g.attention(0, q, q, q, mm[:2], "
            "ss[:2]))", "unclear", err("2"), h),
        api("K2", "save before any step", 'TraceCapture(model).save("e.npz")', "clear error",
            err("nothing captured"), k),
        api("K9", "save after close()", "closed()", "unclear", err("close"), k),
        api("K16", "names a string", 'TraceCapture(model, names="blocks.0.fc")', "unclear",
            err("'blocks.0.fc'"), k),
        api("K19", "spill_dir does not exist", "late()", "unclear", err("/nonexistent/spill"),
            k),
        api("K20", "one capture entered twice (nested with)", "nested()", "traceback",
            err("already active"), "K20"),
        api("K20b", "... then attention still works", "model(x).shape == (2, 8, 32)",
            "traceback (global leak)", TRUE, "K20"),
        api("K21", "two captures exited out of order, then attention",
            "model(x).shape == (2, 8, 32) and F.scaled_dot_product_attention.__module__ != "
            "'dstar.capture'", "silent wrong", TRUE, "K21"),
    ]


# ---- running ------------------------------------------------------------------------------------

SNIPPETS = {"sigterm_make.py": SIGTERM.replace("RUNARGS", RUN).replace("TOOL", "make"),
            "sigterm_vvp.py": SIGTERM.replace("RUNARGS", RUN).replace("TOOL", "vvp"),
            "damaged.py": DAMAGED,
            "cache_int.py": CACHE_INT, "swallowed.py": SWALLOWED,
            "capture_prelude.py": PRELUDES["capture"]}


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("DSTAR_BUILD_DIR", "WAVES")}
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    e["PYTHONWARNINGS"] = "ignore"
    return e


def run_shell(c: Case, scratch: Path) -> Result:
    try:
        p = subprocess.run(["bash", "-c", c.cmd], cwd=scratch, env=env(), capture_output=True,
                           text=True, timeout=c.timeout, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        return Result(None, str(e.stdout or ""), str(e.stderr or ""))
    return Result(p.returncode, p.stdout, p.stderr)


def run_group(group: str, cases: list[Case], scratch: Path) -> dict[str, Result]:
    lines = ["import json, sys, warnings", "warnings.simplefilter('ignore')",
             PRELUDES[group],
             "def _run(_id, _f):",
             "    try:",
             "        v = _f()",
             "        print(json.dumps({'id': _id, 'rc': 0, 'out': repr(v)[:200]}))",
             "    except BaseException as e:",
             "        m = str(e).splitlines()[0] if str(e) else ''",
             "        print(json.dumps({'id': _id, 'rc': 2, 'err': f'{type(e).__name__}: {m}'}))",
             "    sys.stdout.flush()"]
    lines += [f"_run({c.id!r}, lambda: {c.cmd})" for c in cases]
    p = subprocess.run([sys.executable, "-c", "\n".join(lines)], cwd=scratch, env=env(),
                       capture_output=True, text=True, timeout=600)
    got = {}
    for ln in p.stdout.splitlines():
        if ln.startswith("{"):
            d = json.loads(ln)
            got[d["id"]] = Result(d["rc"], d.get("out", ""), d.get("err", ""), api=True)
    for c in cases:
        if c.id not in got:
            tail = p.stderr.strip().splitlines()[-1:] or ["no output"]
            got[c.id] = Result(1, "", f"the group's process failed: {tail[0]}", api=True)
    return got


def can_mount(scratch: Path) -> bool:
    p = subprocess.run(["bash", "-c", "unshare -m --propagation private bash -c 'mkdir -p m && "
                        "mount -t tmpfs -o size=64k tmpfs m'"], cwd=scratch, capture_output=True)
    return p.returncode == 0


def shown(c: Case, r: Result, scratch: Path) -> str:
    """What the case printed, in short: the last line (an API case's exception or value)."""
    text = (r.err if r.rc else r.out) if not (c.ok and r.rc == 0 and not r.api) else r.out
    if r.api:
        text = r.err if r.rc else r.out
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    s = lines[-1] if lines else ""
    s = s.replace(str(scratch), "$S").replace(str(BIN.parent), "$VENV")
    s = re.sub(r"[0-9a-f]{12,}", "<hash>", s)
    s = s if len(s) <= 150 else s[:147] + "..."
    return s.replace("|", "\\|").replace("`", "'")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated case ids")
    ap.add_argument("--md", type=Path, help="also write the table to this file")
    ap.add_argument("--doc", type=Path, help="put the table in this Markdown file, between "
                    f"the lines {BEGIN!r} and {END!r}")
    args = ap.parse_args(argv)
    cases = cli_cases() + api_cases()
    if args.only:
        want = set(args.only.split(","))
        cases = [c for c in cases if c.id in want]
    rows = []
    with tempfile.TemporaryDirectory(prefix="probe4-") as tmp:
        scratch = Path(tmp)
        for name, text in SNIPPETS.items():
            (scratch / name).write_text(text)
        subprocess.run([sys.executable, "-c", FIXTURES], cwd=scratch, check=True, env=env())
        mounts = can_mount(scratch)
        home = Path.cwd()
        os.chdir(scratch)           # the cases' checks name files in the scratch folder
        results: dict[str, Result] = {}
        groups: dict[str, list[Case]] = {}
        for c in cases:
            if c.group:
                groups.setdefault(c.group, []).append(c)
        for group, cs in groups.items():
            results.update(run_group(group, cs, scratch))
        for c in cases:
            if c.group:
                r = results[c.id]
            elif c.mounts and not mounts:
                rows.append((c, "not run here (no unshare -m)", ""))
                continue
            else:
                t0 = time.monotonic()
                r = run_shell(c, scratch)
                print(f"{c.id}: {time.monotonic() - t0:.1f} s", file=sys.stderr)
            rows.append((c, judge(c, r), shown(c, r, scratch)))
        os.chdir(home)
    table = ["| # | case | command | then | now | printed now (last line) |",
             "|---|---|---|---|---|---|"]
    for c, verdict, text in rows:
        cmd = c.cmd if not c.group else f"{c.cmd}  ({c.group})"
        cmd = cmd if len(cmd) <= 160 else cmd[:157] + "..."
        cmd = cmd.replace("|", "\\|").replace("`", "'")
        table.append(f"| {c.id} | {c.what} | `{cmd}` | {c.then} | {verdict} | {text} |")
    counts: dict[str, int] = {}
    for _, verdict, _ in rows:
        counts[verdict] = counts.get(verdict, 0) + 1
    summary = ", ".join(f"{v}: {n}" for v, n in sorted(counts.items()))
    out = "\n".join(table) + f"\n\n{len(rows)} cases; {summary}\n"
    print(out)
    if args.md:
        args.md.write_text(out)
    if args.doc:
        head, rest = args.doc.read_text().split(BEGIN + "\n", 1)
        args.doc.write_text(f"{head}{BEGIN}\n{out}{END}\n{rest.split(END + chr(10), 1)[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
