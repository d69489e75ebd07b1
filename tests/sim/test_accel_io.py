"""``dstar.sim.accel_io`` packs only what the top's words hold: every value a field or memory
word cannot hold, every misspelled argument and every shape that would broadcast or pad is a
``ValueError`` naming it (the probe's A3-A46, which used to wrap silently)."""

import asyncio

import numpy as np
import pytest

from dstar.config import load_config
from dstar.hw.accelerator import Accelerator
from dstar.hw.generate import manifest
from dstar.sim import accel_io as A
from dstar.sim.layer_io import unpack, unpack_named


@pytest.fixture(scope="module")
def man():
    return manifest(Accelerator(load_config(None, "tiny", encoding="nibble")))


def _field(man, word, name):
    return unpack_named(word, man["layouts"]["command"])[name]


def test_in_range_commands_pack_as_before(man):
    w = A.command(man, "LOAD", mem="WEIGHTS", addr=1023, count=1)
    assert _field(man, w, "args.mem.addr") == 1023
    assert _field(man, w, "args.mem.mem") == man["memories"]["WEIGHTS"]["id"]
    w = A.command(man, "RUN_LINEAR", n_tokens=4, n_kt=1, n_mt=1, key=True)
    assert _field(man, w, "args.linear.n_tokens") == 4
    assert _field(man, A.command(man, "LOAD", mem=2, addr=3.0, count=1), "args.mem.addr") == 3


@pytest.mark.parametrize("op, args, named", [
    ("LOAD", {"mem": "WEIGHTS", "addr": -1, "count": 1}, "-1"),                  # A3
    ("LOAD", {"mem": "WEIGHTS", "addr": 2 ** 40, "count": 1}, str(2 ** 40)),      # A4
    ("LOAD", {"mem": "WEIGHTS", "addr": 1024, "count": 1}, "1024"),               # A5
    ("LOAD", {"mem": "WEIGHTS", "addr": 1.7, "count": 1}, "1.7"),                 # A6
    ("RUN_LINEAR", {"ntokens": 4, "n_kt": 1, "n_mt": 1}, "ntokens"),              # A9
    ("RUN_LINEAR", {"n_tokens": 64, "n_kt": 1, "n_mt": 1}, "64"),                 # A10
    ("RUN_ATTENTION", {"slot": 4, "n_tokens": 8}, "slot"),                        # A11
    ("LOAD", {"mem": 99, "addr": 0, "count": 1}, "99"),                           # A13
    ("LOAD", {"mem": "NOPE", "addr": 0, "count": 1}, "NOPE"),                     # A2
    ("BOGUS", {}, "BOGUS"),                                                       # A1
])
def test_command_refuses_what_its_fields_cannot_hold(man, op, args, named):
    with pytest.raises(ValueError, match=named):
        A.command(man, op, **args)


def test_linear_words_refuse_wrapping_truncation_and_broadcast(man):
    st = A.LinearStep(man, 32, 16, 2)
    ones = np.ones((32, 16), np.int64)
    assert st.weight_words(ones) == st.weight_words(ones.astype(float))
    for bad, named in [(np.full((32, 16), 1.7), "1.7"),              # A16
                       (np.full((32, 16), 2 ** 63 - 1, np.int64), str(2 ** 63 - 1)),   # A17
                       (np.full((32, 16), 200), "200"),              # A18
                       (np.full((32, 16), np.nan), "nan"),           # A19
                       (np.ones((48, 16)), r"\(48, 16\)"),           # A20
                       (np.ones((16, 16)), r"\(16, 16\)"),           # A21: was zero-padded
                       (np.ones(16), r"\(16,\)"),                    # A22
                       (np.full((32, 16), "a"), "<U1")]:             # A23
        with pytest.raises(ValueError, match=named):
            st.weight_words(bad)
    img = st.img
    for bad, named in [(np.ones((1, 32)), r"\(1, 32\)"),             # A24: was broadcast
                       (np.ones((2, 16)), r"\(2, 16\)"),             # A25
                       (np.full((2, 32), 2 ** 40), str(2 ** 40)),    # A26
                       (np.full((2, 32), 40000), "40000"),           # A27
                       (np.full((2, 32), 1.7), "1.7"),               # A28
                       (np.full((2, 32), np.nan), "nan")]:           # A29
        with pytest.raises(ValueError, match=named):
            img.row_words(bad, "target")
    with pytest.raises(ValueError, match=str(2 ** 63 - 1)):          # A30
        st.y_words(np.full((2, 16), 2 ** 63 - 1))
    with pytest.raises(ValueError, match="address 0"):               # A31
        st.y_from({})
    tl = man["layouts"]["TARGET"]
    words = img.row_words(np.full((2, 32), -7), "target")
    assert unpack(words[0], tl)[:2] == [-7, -7]


def test_attention_words_refuse_truncation_wrapping_and_short_arrays(man):
    at = A.AttentionStep(man, 8)
    for f in (at.k_words, at.v_words, at.img.q_words):
        for bad, named in [(np.full((8, 32), 1.7), "1.7"), (np.full((8, 32), 200), "200"),
                           (np.full((8, 32), np.nan), "nan")]:               # A34-A38
            with pytest.raises(ValueError, match=named):
                f(bad)
    with pytest.raises(ValueError, match=r"m must have shape \(8,\), got \(2,\)"):   # A40
        at.img.ms_words(np.zeros(2), np.zeros(2))


class _AlwaysReady:
    """A stream adapter that is always valid and ready, payload 0."""

    def __init__(self):
        self.v = {"dout__valid": 1, "dout__payload": 0, "cmd__ready": 1, "din__ready": 1}

    def io(self):
        async def tick():
            pass
        return (lambda n, x: None, lambda n: self.v.get(n, 0), tick)


def test_streams_refuse_negative_counts_and_addresses_past_the_memory(man):
    io = _AlwaysReady().io()
    with pytest.raises(ValueError, match="-1"):                                   # A45
        asyncio.run(A.receive(io, "dout", -1))
    with pytest.raises(ValueError, match="address 5000"):                         # A46
        asyncio.run(A.load(io, man, "WEIGHTS", {5000: 1}))
    with pytest.raises(ValueError, match="address 99"):
        asyncio.run(A.read(io, man, "Y", [99999]))
    with pytest.raises(ValueError, match="word -1"):
        asyncio.run(A.load(io, man, "WEIGHTS", {0: -1}))
