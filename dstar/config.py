"""The one validated configuration type of dstar, its named presets and its TOML loader.

Every parameter of the algorithm (golden model), of the workload run and of the hardware
generator lives here, so that the golden model, the RTL, the testbenches and the reports agree.
This module imports nothing but the standard library (the golden model uses it without Amaranth).

Derived quantities (accumulator width, target clip bound, ...) are properties, never fields, so
they cannot disagree with the fields they derive from. Invalid values raise ``ConfigError`` with
a message naming the field and the value.

Closed choices are enums (``Datapath``, ``Packing``, ``WeightStore``, ``Workload``, ``Encoding``,
``FmdqRule``, ``FmdqLattice``, ``Attention``); TOML files and keyword arguments give them as
their string values, which ``Config`` converts. ``Config.hardware()`` is the part the hardware
generator reads: the config hash, the manifest's ``config`` section and the synthesis baselines
cover only it, so a change of a run field leaves them alone. The FMDQ fields (``encoding`` and
the fields only FMDQ reads) join it only when ``encoding = "fmdq"``, and ``attention`` only when
it is ``sar``: a v1 configuration's hash, and so its baselines, stay as they were before FMDQ
and SAR existed.
"""

import dataclasses
import functools
import math
import numbers
import tomllib
import typing
from dataclasses import dataclass, field, fields
from enum import Enum, StrEnum
from pathlib import Path

__all__ = ["Config", "ConfigError", "Packing", "Datapath", "WeightStore", "Workload", "Encoding",
           "FmdqRule", "FmdqLattice", "Attention", "PRESETS", "preset", "load_config",
           "bits_signed"]


class Packing(StrEnum):
    """How the precision dispatcher packs nibble operations onto the ``G`` PE lanes
    (``dstar.hw.dispatcher``). Each layer keeps one registry keyed by it (golden op streams,
    dispatcher components, cycle models); ``tests/cli/test_registries.py`` checks they agree."""

    #: The lanes run each group of a slice together, for as many passes as its most expensive
    #: element; lanes of cheaper elements idle.
    LOCKSTEP = "lockstep"
    #: Per-lane operation queues: each lane issues only its own elements' non-zero nibbles,
    #: under one of ``lane_rotation`` rotations per slice (the chosen design).
    COMPACT = "compact"


class Datapath(StrEnum):
    """Which linear-layer top the generator builds (``dstar.hw.generate``)."""

    #: DSTAR's differential linear datapath in the configured ``encoding`` (FMDQ's
    #: quantization unit and SIMD-4 arrays, ``dstar.hw.fmdq.linear``; v1's delta encoder,
    #: precision dispatcher and nibble lanes, ``dstar.hw.linear``), plus the attention engine.
    DSTAR = "dstar"
    #: The dense INT8 (W8A8) baseline of the same tiles, arrays and peak 8-bit throughput
    #: (``dstar.hw.dense``): 8-bit x 8-bit lanes, no encoder or dispatcher, no attention
    #: engine; ``packing`` does not apply. Its lanes read a register tile through a per-lane
    #: row multiplexer (like DSTAR's lanes): kept as a comparison point.
    DENSE = "dense"
    #: The lean dense INT8 (W8A8) datapath, the baseline every DSTAR ratio is measured against
    #: (``dstar.hw.int8``): the same peak 8-bit throughput, memories and host ports as
    #: ``DENSE``, with weight-stationary 8x8 MACs holding one weight each (double-buffered, no
    #: row multiplexer) and the tokens streamed past them.
    INT8 = "int8"


class WeightStore(StrEnum):
    """How a PE array holds its double-buffered weight tile (``dstar.hw.pe_array.lane_weights``);
    behaviour and timing are the same."""

    #: One shared tile of registers and a multiplexer per lane over the rows it may read.
    REGISTERS = "registers"
    #: Per lane, a memory of the rows it may read (LUT RAM on FPGAs): no wide multiplexers.
    LANE_RAM = "lane_ram"


class Workload(StrEnum):
    """Which bundled DiT the golden model runs (``dstar.golden.workloads``): same architecture
    family, different training data."""

    #: Class-conditional DiT on the MNIST-5k digits (10 classes).
    DIGITS = "digits"
    #: DiT on 32x32 grayscale crops of the photos in ``dstar.golden.photos``, conditioned on
    #: the source photo (16 classes).
    PHOTOS = "photos"


class Encoding(StrEnum):
    """How a differential linear layer codes its temporal difference (spec sections 3 and 7.2).
    Registries keyed by it: ``dstar.golden.difflinear.ENCODINGS`` (the row step and its
    statistics)."""

    #: v1: a shift per group of ``group`` channels of a token, a class per element (ZERO, LOW,
    #: HIGH: 0, 1 or 2 nibble passes; ``golden.encoder``), packed by ``packing``.
    NIBBLE = "nibble"
    #: v2, the paper's FMDQ: a shift and a width (0, 2, 4, 6, 8 bits) per sub-channel (one
    #: channel over a tile of ``token_tile`` tokens), 2-bit slices sorted into SIMD-4 groups
    #: (``golden.fmdq``).
    FMDQ = "fmdq"


class FmdqLattice(StrEnum):
    """The activation lattice of FMDQ's differential layers, set at key steps (registry:
    ``dstar.golden.difflinear.LATTICES``). v1 (``encoding = "nibble"``) always uses ``TOKEN``."""

    #: v1's: per token row ``d[n] = max|X[n, :]| / (127 * 2**lattice_bits)``.
    TOKEN = "token"
    #: One step for every row of the layer, ``max|X| / (127 * 2**lattice_bits)`` over the key
    #: step's whole input: a static base (calibrated on the key step, not offline).
    LAYER = "layer"


class FmdqRule(StrEnum):
    """How FMDQ chooses a sub-channel's shift and width (spec 7.2; registry:
    ``dstar.golden.fmdq.RULES``)."""

    #: v1's shift rule per sub-channel (the smallest shift whose codes fit INT8; lossless but for
    #: the ``tau`` dead zone), the width the smallest that holds the codes.
    LOSSLESS = "lossless"
    #: The paper's: the width from the sub-channel's largest ``|D|`` against the thresholds
    #: ``fmdq_thr0 * 4**n`` (2, 4, 6, 8 bits), the shift the smallest that fits that width.
    MAGNITUDE = "magnitude"


class Attention(StrEnum):
    """Which attention mechanism runs (spec sections 4 and 7.3), in the golden model and the
    attention engine. ``residual`` is a run field, ``sar`` joins ``hardware()``
    (``_hw_beyond_v1``)."""

    #: v1: dynamic masks chosen at every attention key step, a cached residual of the blocks
    #: outside the mask (``golden.attention.AttentionReuse``).
    RESIDUAL = "residual"
    #: The paper's sparse attention reuse: static profiled block masks (``masks``), cached
    #: probabilities at cache steps, reuse steps without Q, K or softmax (``golden.sar``).
    SAR = "sar"


def _hw(default, only=None):
    """A field the hardware generator (``dstar.hw``) reads: part of ``Config.hardware()``
    (``only``: an ``Encoding`` the field belongs to; it joins ``hardware()`` only then)."""
    return field(default=default, metadata={"hw": True, "only": only})


def _hw_beyond_v1(default):
    """A field the hardware generator reads whose value ``default`` is v1's: at that value it
    is a run field (v1's hardware, and so its configuration hash, predates the field), at any
    other it joins ``hardware()`` (another variant's Verilog)."""
    return field(default=default, metadata={"v1": default})


class ConfigError(ValueError):
    """A configuration field has a bad value, or a configuration cannot be built."""


def bits_signed(bound: int) -> int:
    """Width of the smallest two's-complement integer that holds every value in [-bound, bound]."""
    return max(1, int(bound).bit_length() + 1)


@dataclass(frozen=True)
class Config:
    """A complete dstar configuration. docs/reference.md ("Fields") gives the meaning of each
    field."""

    # Fields made with _hw() are read by the hardware generator (Config.hardware()).
    # --- differential linear layers (spec section 3) ---
    group: int = _hw(16)        # G: channels per group; also the lanes of one PE column
    e_max: int = _hw(7)         # largest per-group power-of-two shift
    tau: int = _hw(0)           # tolerance in lattice units: dead zone and allowed rounding error
    refresh_linear: int = 0     # key step every N steps (0: only the first step)
    state_bits: int = _hw(16)   # width of the stored reconstruction Xs_int
    lattice_bits: int = 1       # extra fraction bits of the activation lattice (0: spec, max/127)
    # Power-of-two refinement of a token's lattice between key steps (golden model only so far):
    # at most refine_max halvings; a token's lattice halves while its peak is at most refine_at
    # of the key step's range 127 * 2**lattice_bits (golden.difflinear.lattice_refinements).
    refine_max: int = 0
    refine_at: float = 0.85
    # --- sparse attention reuse (spec section 4) ---
    block_q: int = _hw(16)
    block_k: int = _hw(16)
    theta: float = 0.6          # cumulative block mass a query block's mask must reach
    refresh_attn: int = 2       # attention key step every N steps (0: only the first)
    # SAR only (golden model only so far): every step before this one is a cache step, so
    # reuse starts in the later, low-noise steps; from it on refresh_attn's cadence holds.
    sar_reuse_from: int = 0
    attn_frac_bits: int = _hw(6)  # softmax exp2 LUT has 2**attn_frac_bits entries
    attn_out_frac_bits: int = _hw(8)  # fraction bits of the integer attention output
    head_dim: int = _hw(32)     # Dh of the attention engine (the bundled DiT: 128 hidden / 4 heads)
    attn_slots: int = _hw(4)    # layer/head slots of the attention engine (step counter, mask, R)
    # Keys per cycle of the softmax unit (a power of two dividing group; 0: the largest of 4, 2, 1
    # that divides group and m_tile * n_arrays, see softmax_keys_per_cycle).
    softmax_lanes: int = _hw(0)
    attention: Attention = _hw_beyond_v1(Attention.RESIDUAL)  # v1's residual reuse or SAR
    masks: str = ""             # SAR's mask file ("": golden/data/masks_<workload>.npz)
    # --- workload run (dstar analyze) ---
    workload: Workload = Workload.DIGITS  # the bundled DiT that runs (Workload)
    steps: int = 50             # DDIM steps
    samples: int = 10           # class-conditional images (labels cycle 0..9)
    cfg_scale: float = 2.5      # classifier-free guidance (1.0: off, no doubled batch)
    seed: int = 0
    # --- hardware generator (spec section 5) ---
    k_tile: int = _hw(64)       # reduction rows of one weight tile (multiple of group)
    m_tile: int = _hw(8)        # output columns of one weight tile (= PE columns per array)
    n_arrays: int = _hw(2)      # PE arrays sharing one dispatcher
    datapath: Datapath = _hw(Datapath.DSTAR)  # DSTAR's, or the dense INT8 baseline (Datapath)
    packing: Packing = _hw(Packing.COMPACT)   # the dispatcher's strategy (Packing)
    lane_fifo_depth: int = _hw(8)  # per-lane operation queue of the compacting dispatcher
    lane_rotation: int = _hw(0)  # compact: lanes each element may land on (0: min(4, group))
    weight_store: WeightStore = _hw(WeightStore.REGISTERS)  # how a PE array holds its tile
    max_k: int = _hw(512)       # largest reduction dimension K a layer may have
    max_m: int = _hw(512)       # largest output dimension M
    max_tokens: int = _hw(256)  # largest number of token rows per layer run
    # --- FMDQ (spec 7.2 and 7.4; every top implements both encodings, FMDQ the default) ---
    encoding: Encoding = _hw(Encoding.FMDQ, only=Encoding.FMDQ)  # difference coding (Encoding)
    # T: tokens of one sub-channel, the FMDQ PE array's rows (T = group / 2: T x m_tile SIMD-4
    # PEs match the INT8 array's peak; docs/design/fmdq.md, "The choice").
    token_tile: int = _hw(8, only=Encoding.FMDQ)
    sort_window: int = _hw(32, only=Encoding.FMDQ)  # channels the quantization unit sorts at once
    fmdq_rule: FmdqRule = _hw(FmdqRule.LOSSLESS, only=Encoding.FMDQ)  # shift/width rule
    fmdq_thr0: int = _hw(4, only=Encoding.FMDQ)     # magnitude rule: 2-bit threshold (lattice)
    fmdq_lattice: FmdqLattice = FmdqLattice.TOKEN   # FMDQ's activation lattice (host side)

    def __post_init__(self):
        for name, want in _field_types().items():
            v = getattr(self, name)
            # NumPy scalars (a value read from an array) count as the Python numbers they are.
            if want in (int, float) and isinstance(v, numbers.Integral) \
                    and not isinstance(v, bool):
                object.__setattr__(self, name, want(v))
                continue
            if want is float and isinstance(v, numbers.Real) and not isinstance(v, bool):
                object.__setattr__(self, name, float(v))
                v = float(v)
            if issubclass(want, Enum) and isinstance(v, str):
                object.__setattr__(self, name, _member(want, name, v))
                continue
            if not isinstance(v, want) or isinstance(v, bool):
                kind = f"one of {', '.join(want)}" if issubclass(want, Enum) else want.__name__
                raise ConfigError(f"{name} must be {kind}, got {v!r}")
        self._check()

    # ----- validation -----
    def _range(self, name, lo, hi=None):
        v = getattr(self, name)
        if v < lo or (hi is not None and v > hi):
            span = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
            raise ConfigError(f"{name} must be {span}, got {v!r}")

    def _check(self):
        for name, want in _field_types().items():
            if want is float and not math.isfinite(getattr(self, name)):
                raise ConfigError(f"{name} must be a finite number, got {getattr(self, name)!r}")
        self._range("group", 2, 64)
        self._range("e_max", 0, 15)
        self._range("tau", 0, 1 << 14)
        self._range("refresh_linear", 0)
        self._range("state_bits", 9, 32)
        if (1 << (self.e_max - 1) if self.e_max else 0) >= self.state_max // 2:
            raise ConfigError(f"state_bits={self.state_bits} is too narrow for e_max={self.e_max}: "
                              "the rounding margin would eat half the state range")
        self._range("lattice_bits", 0, 8)
        self._range("refine_max", 0, 8)
        if not 0.0 < self.refine_at <= 1.0:
            raise ConfigError(f"refine_at must be in (0, 1], got {self.refine_at!r}")
        if 127 << self.lattice_bits > self.target_max:
            raise ConfigError(f"lattice_bits={self.lattice_bits} puts a key step's values "
                              f"(up to {127 << self.lattice_bits}) beyond the state's "
                              f"target_max={self.target_max} (state_bits={self.state_bits})")
        self._range("block_q", 1, 1024)
        self._range("block_k", 1, 1024)
        if not 0.0 < self.theta <= 1.0:
            raise ConfigError(f"theta must be in (0, 1], got {self.theta!r}")
        self._range("refresh_attn", 0)
        self._range("sar_reuse_from", 0, 1000)
        self._range("attn_frac_bits", 1, 8)
        self._range("attn_out_frac_bits", 0, 8)
        self._range("head_dim", 1, 128)      # the 23-bit logit / 24-bit PV widths assume <= 128
        self._range("attn_slots", 1, 4096)
        p = self.softmax_lanes
        if p != 0 and (p < 1 or p & (p - 1) or self.group % p):
            raise ConfigError(f"softmax_lanes must be a power of two dividing group={self.group}, "
                              f"got {p!r}")
        self._range("steps", 1, 1000)
        self._range("samples", 1, 10000)
        if self.cfg_scale < 1.0:
            raise ConfigError(f"cfg_scale must be >= 1.0, got {self.cfg_scale!r}")
        self._range("seed", 0)
        self._range("k_tile", self.group, 4096)
        if self.k_tile % self.group:
            raise ConfigError(f"k_tile={self.k_tile} must be a multiple of group={self.group}")
        self._range("m_tile", 1, 256)
        self._range("n_arrays", 1, 64)
        if self.datapath in (Datapath.DENSE, Datapath.INT8) and self.group % 2:
            # The baseline's 8x8 lanes are half the nibble lanes (equal peak 8-bit throughput).
            raise ConfigError(f"datapath {self.datapath.value!r} needs an even group (8-bit "
                              f"lanes = group / 2), got group={self.group}")
        self._range("lane_fifo_depth", 2, 1024)
        r = self.lane_rotation
        if r and (r > self.group or self.group % r or r & (r - 1)):
            raise ConfigError(f"lane_rotation must be 0 or a power of two dividing "
                              f"group={self.group}, got {r!r}")
        self._range("max_k", self.group, 1 << 16)
        if self.max_k % self.group:
            raise ConfigError(f"max_k={self.max_k} must be a multiple of group={self.group}")
        self._range("max_m", 1, 1 << 16)
        self._range("max_tokens", 1, 1 << 20)
        self._range("token_tile", 1, 4096)
        self._range("sort_window", 1, 1 << 16)
        self._range("fmdq_thr0", 1, 1 << 14)
        # Only the differential datapath codes its difference: the dense tops read no encoding.
        if self.encoding is Encoding.FMDQ and self.datapath is Datapath.DSTAR \
                and self.token_tile > self.max_tokens:
            raise ConfigError(f"token_tile={self.token_tile} must be <= max_tokens="
                              f"{self.max_tokens} (a tile's tokens share one pass)")
        if self.acc_bits > 48:
            raise ConfigError(f"accumulator would need {self.acc_bits} bits (> 48) for "
                              f"max_k={self.max_k}, state_bits={self.state_bits}")

    # ----- derived quantities (the integer contract of spec sections 2-3) -----
    @property
    def state_max(self) -> int:
        """Largest magnitude ``Xs_int`` may hold: ``2**(state_bits-1) - 1``."""
        return (1 << (self.state_bits - 1)) - 1

    @property
    def target_max(self) -> int:
        """Bound the encoder clips its target ``X_int`` to, so that the state never overflows:
        a rounded step lands at most ``2**(e_max-1)`` beyond the target."""
        return self.state_max - ((1 << (self.e_max - 1)) if self.e_max else 0)

    @property
    def delta_max(self) -> int:
        """Largest ``|D| = |target - Xs_int|``."""
        return self.target_max + self.state_max

    @property
    def shift_bits(self) -> int:
        return max(1, self.e_max.bit_length())

    @property
    def acc_bound(self) -> int:
        """Largest ``|Y_int|`` at any time: ``max_k * 127 * state_max`` (the invariant
        ``Y_int == W_q^T . Xs_int`` holds for every partial order of additions)."""
        return self.max_k * 127 * self.state_max

    @property
    def acc_bits(self) -> int:
        return bits_signed(self.acc_bound)

    @property
    def e_tol(self) -> int:
        """Largest shift whose rounding error ``2**(e-1)`` is within ``tau`` (capped at e_max)."""
        e = 0
        while e < self.e_max and (1 << e) <= self.tau:
            e += 1
        return e

    # ----- conversions -----
    @property
    def softmax_keys_per_cycle(self) -> int:
        """``P``, the softmax unit's keys per cycle: ``softmax_lanes``, or by default the
        largest of 4, 2, 1 dividing ``group`` and ``m_tile * n_arrays`` (a beat of logits is a
        slice of one accumulator chunk)."""
        if self.softmax_lanes:
            return self.softmax_lanes
        p = 4
        while self.group % p or (self.m_tile * self.n_arrays) % p:
            p //= 2
        return p

    def replace(self, **changes) -> "Config":
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Every field, enums as their string values (the TOML form)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    def hardware(self) -> dict:
        """The fields the hardware generator reads (``to_dict`` form): what the config hash,
        the ``params.json`` ``config`` section and the synthesis baselines cover, so that a
        change of a run field (``steps``, ``theta``, ...) leaves them alone. Fields of another
        encoding than ``encoding`` (``_hw(only=...)``) are left out: they reach no hardware;
        ``attention`` joins only when it is not v1's ``residual`` (``_hw_beyond_v1``)."""
        return self._part("hardware")

    def run_params(self) -> dict:
        """The other fields: the golden model's and the workload run's (``to_dict`` form)."""
        return self._part("run")

    def unused(self) -> dict:
        """The hardware fields of another encoding (``to_dict`` form): in neither
        ``hardware()`` nor ``run_params()``."""
        return self._part("unused")

    def _part(self, part: str) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)
                if self._part_of(f) == part}

    def _part_of(self, f) -> str:
        """Which of ``hardware()``, ``run_params()`` and ``unused()`` field ``f`` is in."""
        md = f.metadata
        if "v1" in md:
            return "run" if getattr(self, f.name) == md["v1"] else "hardware"
        if not md.get("hw"):
            return "run"
        return "hardware" if md["only"] in (None, self.encoding) else "unused"

    def derived(self) -> dict:
        return {"state_max": self.state_max, "target_max": self.target_max,
                "delta_max": self.delta_max, "shift_bits": self.shift_bits,
                "acc_bits": self.acc_bits, "e_tol": self.e_tol}


@functools.cache
def _field_types() -> dict[str, type]:
    return typing.get_type_hints(Config)


def _member(enum: type[StrEnum], name: str, value: str) -> StrEnum:
    """``enum(value)``, or a ``ConfigError`` naming the field, the value and the choices."""
    try:
        return enum(value)
    except ValueError:
        pass
    if enum is Packing and value == Datapath.DENSE:
        raise ConfigError('packing = "dense" is not a packing: the dense INT8 baseline is a '
                          'datapath, use datapath = "dense"') from None
    raise ConfigError(f"{name} must be one of {', '.join(enum)}, got {value!r}") from None


def _plain(v):
    return v.value if isinstance(v, Enum) else v


PRESETS: dict[str, Config] = {
    "default": Config(),
    # Fast simulation: small tiles and memories, a short sampling run.
    "tiny": Config(k_tile=32, m_tile=4, n_arrays=2, lane_fifo_depth=4, max_k=128, max_m=64,
                   max_tokens=32, steps=20, samples=4, token_tile=8, sort_window=32),
    # A slice of a real accelerator: 64 output columns (8 arrays of 8) served by one encoder
    # and dispatcher; for area and the cycle model (too big to simulate in the test tiers).
    "large": Config(n_arrays=8),
}


def preset(name: str, **overrides) -> Config:
    """The preset ``name``, with ``overrides`` (field -> value, validated) applied: for example
    ``preset("tiny", encoding="nibble")``, the tiny preset's v1 design."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name].replace(**overrides) if overrides else PRESETS[name]


def _read_toml(path: Path) -> dict:
    """The table of a TOML config file, or a ``ConfigError`` naming the file and the reason."""
    where = f"config file {str(path)!r}"
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{where} is a folder, not a file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                          f"{e.start})") from None
    except OSError as e:
        raise ConfigError(f"{where} cannot be read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where} is not valid TOML: {e}") from None


def load_config(path: str | Path | None = None, preset_name: str | None = None,
                **overrides) -> Config:
    """Resolve a configuration: a preset (``default`` unless named), then a TOML file's keys
    (a file may name its own base with ``preset = "..."``), then keyword overrides (``None``
    values are ignored, so CLI options can be passed through)."""
    table: dict = {}
    if path is not None:
        path = Path(path)
        table = _read_toml(path)
        base = table.pop("preset", None)
        if base is not None:
            if not isinstance(base, str):
                raise ConfigError(f"preset in {str(path)!r} must be a string naming one of "
                                  f"{', '.join(PRESETS)}, got {base!r}")
            if preset_name is not None and preset_name != base:
                raise ConfigError(f"--preset {preset_name!r} conflicts with preset = {base!r} "
                                  f"in {str(path)!r}")
            preset_name = base
    cfg = preset("default" if preset_name is None else preset_name)   # "" is no preset name
    known = {f.name for f in fields(Config)}
    unknown = sorted(set(table) - known)
    if unknown:
        where = f" in {str(path)!r}" if path is not None else ""
        raise ConfigError(f"unknown config key(s){where}: {', '.join(unknown)}")
    cfg = cfg.replace(**table)
    return cfg.replace(**{k: v for k, v in overrides.items() if v is not None})
