"""Hardware sizes derived from a ``Config``: the one place the RTL, the cycle models and the
manifest take them from. Amaranth-free (it imports only ``dstar.config`` and the golden
model's format constants), so that the ``dstar.sim`` cycle models, and anything that only
needs to check a configuration, build a geometry without elaborating anything.

One frozen dataclass per top, all of the same shape: built from a ``Config`` (plus the few
sizes a caller chooses), validated in ``__post_init__`` (``ConfigError`` names the field and
the value), every derived width, depth and latency a property, ``to_dict()`` for the manifest:

* ``Geometry``: the linear datapath (``dstar.hw.linear.LinearLayer``);
* ``DenseGeometry``: the dense INT8 datapaths (``dstar.hw.dense.DenseLinearLayer``,
  ``dstar.hw.int8.Int8LinearLayer``);
* ``SoftmaxGeometry``: the softmax unit and normalizer (``dstar.hw.softmax``);
* ``AttentionGeometry``: the attention engine (``dstar.hw.attention.AttentionEngine``);
* the accelerator top's, ``dstar.hw.accelerator_geometry.AcceleratorGeometry``, is built from
  these but lives beside its command protocol (its word and command layouts are Amaranth's).

Linear datapath. A layer run is cut into *passes*: one weight tile of ``k_tile`` reduction rows by
``n_arrays * m_tile`` output columns (array ``a`` holds columns ``a*m_tile .. (a+1)*m_tile-1`` of
the pass's column block). Within a pass every token contributes one *slice*: its ``k_tile``
elements of the pass's K range, i.e. ``slice_groups`` encoded groups. Lane ``l`` of every array
owns element ``l`` of each group (``k = j*G + l``).
"""

from dataclasses import dataclass
from typing import ClassVar

from dstar.config import Attention, Config, ConfigError, Datapath, Encoding, bits_signed
from dstar.golden.attention import THETA_BITS
from dstar.golden.dispatch import STRATEGIES
from dstar.golden.softmax import MANT_BITS, RECIP_BITS, SHIFT_MAX, sum_bits

__all__ = ["Geometry", "DenseGeometry", "SoftmaxGeometry", "AttentionGeometry", "uwidth",
           "DEFAULT_LANE_ROTATION", "COUNTER_BITS", "LOGIT_BITS"]

#: Width of every event counter port (``cycles``, ``stall_load``, ``count_*``): wraps after
#: 2**32 events, far beyond any run the testbenches or the board make.
COUNTER_BITS = 32

#: Logit width for ``Dh <= 128``: ``|S| <= Dh * 128**2`` (``golden/ATTENTION.md``); the softmax
#: unit's default when it is built alone.
LOGIT_BITS = bits_signed(128 * 128 * 128)

#: Largest magnitude of an INT8 operand (activations and weights may both be -128).
_INT8_MAG = 128

#: Rotations of the compacting strategy unless told otherwise: with the balanced choice per
#: slice, 92% of the element-level ideal and lane utilization 0.92 over the bundled DiT's
#: whole run (static split: 70%, 0.70; R = 8: 96%, 0.96 at twice the weight-row selection;
#: ``dstar.hw.dispatcher`` docstring).
DEFAULT_LANE_ROTATION = 4


def uwidth(n: int) -> int:
    """Bits of an unsigned counter that holds ``0 .. n-1`` (at least 1)."""
    return max(1, (int(n) - 1).bit_length())


@dataclass(frozen=True)
class Geometry:
    """``cfg.lane_rotation`` (R, a power of two dividing G; 0 means the default, 4 or the largest
    power of two below it that divides G): in the compacting strategy, rotation ``r`` gives
    lane ``l`` element ``(l - r (r + 1) / 2) mod G`` of each group, and the dispatcher picks one
    of the R rotations per slice to balance the lanes (``dstar.hw.dispatcher``), so a busy channel's
    work can land on R lanes instead of always one. R = 1 is the plain static split. Each lane
    then selects among ``R * slice_groups`` weight rows per buffer (the area cost; measurements
    in ``dstar.hw.dispatcher``).

    ``y_words`` (0: ``max_tokens * n_mt_max``) overrides the accumulator memory's depth,
    ``y_banks`` (1, 2 or 4) splits it into banks by the top address bits, each with its own
    read port, and ``y_readers`` (1 or 2) gives the host that many read ports (``PEArray``): a
    user of the arrays other than the linear datapath (the attention engine) sizes them for
    itself."""
    cfg: Config
    y_words: int = 0
    y_banks: int = 1
    y_readers: int = 1

    def __post_init__(self):
        if self.y_banks not in (1, 2, 4) or self.y_readers not in (1, 2) or self.y_banks > 1 and (
                self.y_words < 2 * self.y_banks or self.y_words & (self.y_words - 1)):
            raise ValueError("y_banks must be 1, 2 or 4 (more than 1: with a power-of-two "
                             "y_words), y_readers 1 or 2")
        if self.cfg.k_tile > 8 * self.cfg.group:
            # The encoder and the lane sequencers handle one whole slice per cycle.
            raise ConfigError(f"k_tile={self.cfg.k_tile} needs more than 8 groups per slice "
                              f"(group={self.cfg.group}); the slice-wide encoder would be huge")

    @property
    def rotation(self) -> int:
        """R: distinct lane rotations of the packing strategy (1 if it does not rotate,
        ``dstar.golden.dispatch.STRATEGIES``)."""
        if not STRATEGIES[self.cfg.packing].rotates:
            return 1
        if self.cfg.lane_rotation:
            return self.cfg.lane_rotation
        r = DEFAULT_LANE_ROTATION
        while self.cfg.group % r:
            r //= 2
        return r

    def rotation_offset(self, rot: int) -> int:
        """Lane offset of rotation ``rot`` (``golden.dispatch.rotation_offset``: triangular)."""
        return rot * (rot + 1) // 2 % self.cfg.group

    def lane_element(self, lane: int, rot: int) -> int:
        """In-group element that ``lane`` handles under rotation index ``rot``."""
        return (lane - self.rotation_offset(rot)) % self.cfg.group

    @property
    def excess_max(self) -> int:
        """Saturation of the compacting dispatcher's per-lane excess (``16 * S - 1``: eight
        dense bundles, as deep as a lane queue can usefully run ahead)."""
        return 16 * self.slice_groups - 1

    @property
    def rot_bits(self) -> int:
        return uwidth(self.rotation)

    # ----- slices and passes -----
    @property
    def lanes(self) -> int:
        return self.cfg.group

    @property
    def slice_groups(self) -> int:
        """S: groups per token slice (``k_tile // group``)."""
        return self.cfg.k_tile // self.cfg.group

    @property
    def block_cols(self) -> int:
        """Output columns of one pass over all arrays."""
        return self.cfg.m_tile * self.cfg.n_arrays

    @property
    def n_kt_max(self) -> int:
        return -(-self.cfg.max_k // self.cfg.k_tile)

    @property
    def n_mt_max(self) -> int:
        return -(-self.cfg.max_m // self.block_cols)

    def n_kt(self, k: int) -> int:
        return -(-k // self.cfg.k_tile)

    def n_mt(self, m: int) -> int:
        return -(-m // self.block_cols)

    # ----- widths -----
    @property
    def target_bits(self) -> int:
        return bits_signed(self.cfg.target_max)

    @property
    def delta_bits(self) -> int:
        return bits_signed(self.cfg.delta_max)

    @property
    def op_shift_bits(self) -> int:
        """Width of a nibble op's shift ``e + 4*nibble`` (up to ``e_max + 4``)."""
        return (self.cfg.e_max + 4).bit_length()

    @property
    def token_bits(self) -> int:
        return uwidth(self.cfg.max_tokens)

    @property
    def row_bits(self) -> int:
        """Index of a weight row within a lane's slice (``0 .. slice_groups-1``)."""
        return uwidth(self.slice_groups)

    @property
    def psum_bits(self) -> int:
        """A lane's partial sum over one slice, mid-element (low nibble only) included (weights
        may be any INT8, -128 included)."""
        return bits_signed((self.slice_groups * 128 + 15) * (1 << self.cfg.e_max) * 128)

    @property
    def tile_sum_bits(self) -> int:
        """One token's contribution of one pass to one output column."""
        return bits_signed(self.cfg.k_tile * 128 * (1 << self.cfg.e_max) * 128)

    @property
    def acc_bits(self) -> int:
        return self.cfg.acc_bits

    # ----- memories -----
    @property
    def row_depth(self) -> int:
        """Words of the target and state memories: ``max_tokens * n_kt_max`` slices,
        address ``token * n_kt_max + kt``."""
        return self.cfg.max_tokens * self.n_kt_max

    @property
    def weight_depth(self) -> int:
        """Words of each array's weight memory: ``n_kt_max * n_mt_max`` tiles of ``k_tile``
        rows of ``m_tile`` INT8 (``dstar.hw.linear.LinearLayer``'s address rule)."""
        return self.n_kt_max * self.cfg.k_tile * self.n_mt_max

    @property
    def y_depth(self) -> int:
        """Words of each array's accumulator memory: ``max_tokens * n_mt_max`` rows of
        ``m_tile`` accumulators, address ``token * n_mt_max + mt`` (or ``y_words``)."""
        return self.y_words or self.cfg.max_tokens * self.n_mt_max

    @property
    def psum_depth(self) -> int:
        """Per-lane partial-sum queue: how many slices a lane may run ahead of the reduction."""
        return self.cfg.lane_fifo_depth

    @property
    def token_depth(self) -> int:
        """Slices that may wait for their reduction: enough to cover every lane queue and
        partial-sum queue in flight, so that all-zero slices do not stall the dispatcher
        behind busy lanes."""
        return self.cfg.lane_fifo_depth + self.psum_depth + 2

    @property
    def counter_bits(self) -> int:
        return COUNTER_BITS

    def memories(self) -> dict[str, int]:
        """Words of the linear top's large memories, by what they hold and the fields that size
        them (an upper bound of every datapath's: the dense top has no state memory)."""
        n = self.cfg.n_arrays
        return {"target and state rows (max_tokens x max_k / k_tile)": 2 * self.row_depth,
                "weights (max_k x max_m / block_cols, per array)": n * self.weight_depth,
                "accumulators (max_tokens x max_m / block_cols, per array)": n * self.y_depth}

    def to_dict(self) -> dict:
        names = ["lanes", "rotation", "excess_max", "slice_groups", "block_cols",
                 "n_kt_max", "n_mt_max", "target_bits", "delta_bits", "op_shift_bits",
                 "token_bits", "row_bits", "psum_bits",
                 "tile_sum_bits", "acc_bits", "row_depth", "weight_depth", "y_depth",
                 "psum_depth", "token_depth"]
        return {n: getattr(self, n) for n in names}


@dataclass(frozen=True)
class DenseGeometry:
    """Sizes of the dense INT8 datapaths (``dense`` and ``int8``): those of ``Geometry`` that
    they share (tiles, column blocks, memory depths and addresses, as ``base``) plus their own
    lanes and widths."""
    cfg: Config

    def __post_init__(self):
        if self.cfg.datapath not in (Datapath.DENSE, Datapath.INT8):
            raise ConfigError(f"a dense INT8 top needs datapath 'dense' or 'int8', got "
                              f"{self.cfg.datapath.value!r}")

    @property
    def base(self) -> Geometry:
        return Geometry(self.cfg)

    @property
    def lanes(self) -> int:
        """8x8 lanes per array: half the nibble lanes of a DSTAR array (``dstar.hw.dense``)."""
        return self.cfg.group // 2

    @property
    def chunks(self) -> int:
        """Cycles per token slice: ``k_tile / lanes`` = ``2 * slice_groups``."""
        return self.cfg.k_tile // self.lanes

    @property
    def slice_bits(self) -> int:
        """One token's contribution of one pass to one output column."""
        return bits_signed(self.cfg.k_tile * _INT8_MAG * _INT8_MAG)

    @property
    def chunk_bits(self) -> int:
        """One token's contribution of one chunk (``lanes`` products) to one output column."""
        return bits_signed(self.lanes * _INT8_MAG * _INT8_MAG)

    @property
    def acc_bits(self) -> int:
        """Accumulators of ``Y_int``: ``max_k`` INT8 x INT8 products (narrower than DSTAR's,
        whose activations are ``state_bits`` wide)."""
        return bits_signed(self.cfg.max_k * _INT8_MAG * _INT8_MAG)

    @property
    def acc_stages(self) -> int:
        """Cycles from a pass's last chunk to its last accumulator write (stages E, A, B)."""
        return 3

    def n_passes(self, k: int, m: int) -> int:
        """Passes of a ``K x M`` layer: K tiles times column blocks."""
        b = self.base
        return b.n_kt(k) * b.n_mt(m)

    def to_dict(self) -> dict:
        b = self.base
        out = {n: getattr(b, n) for n in ("block_cols", "n_kt_max", "n_mt_max", "row_depth",
                                           "weight_depth", "y_depth")}
        out.update({n: getattr(self, n) for n in ("lanes", "chunks", "slice_bits",
                                                   "acc_bits")})
        return out


@dataclass(frozen=True)
class SoftmaxGeometry:
    """Sizes and latencies of ``dstar.hw.softmax.SoftmaxUnit`` and ``Normalizer``:
    ``logit_bits`` (signed logits), ``max_row`` (longest row, ``cfg.max_tokens`` unless given)
    and ``acc_bits`` (the normalizer's accumulators, ``bits_signed(128 * 255 * 2**e_max *
    max_row)`` unless given); ``lanes`` (``P = cfg.softmax_lanes``, keys per beat) sets the
    words of a row, the divider's quotient bits per cycle and whether rows overlap."""
    cfg: Config
    logit_bits: int = LOGIT_BITS
    max_row: int | None = None
    acc_bits: int | None = None

    #: Registers from the exponent pass's memory read to ``o_p``: read (2), ``Smax - S``,
    #: ``d * m``, coarse shift, fine shift and saturation, LUT.
    EXP_STAGES: ClassVar[int] = 7
    #: Restoring divider: quotient bits of ``r`` (one per cycle with one lane).
    DIV_CYCLES: ClassVar[int] = RECIP_BITS + 1
    #: Most quotient bits per cycle: three chained trials keep the divider's step off the tiny
    #: top's critical path at 50 MHz (four set it at 49.18 MHz); more than 8 would need ``L``
    #: above 8, see ``div_bits``.
    DIV_BITS_MAX: ClassVar[int] = 3
    #: Normalizer stages (product register, output register).
    NORM_STAGES: ClassVar[int] = 2
    P_BITS: ClassVar[int] = 8
    #: ``r`` of the reciprocal, ``[2**16, 2**17)``.
    R_BITS: ClassVar[int] = RECIP_BITS + 1
    SH_BITS: ClassVar[int] = SHIFT_MAX.bit_length()
    MANT_BITS: ClassVar[int] = MANT_BITS

    def __post_init__(self):
        if self.max_row is None:
            object.__setattr__(self, "max_row", self.cfg.max_tokens)
        if self.acc_bits is None:
            object.__setattr__(self, "acc_bits",
                               bits_signed((128 * 255 << self.cfg.e_max) * self.max_row))
        if not 1 <= self.max_row <= 1 << 16:
            raise ConfigError(f"max_row must be in [1, 65536], got {self.max_row!r}")
        if not 2 <= self.logit_bits <= 32:
            raise ConfigError(f"logit_bits must be in [2, 32], got {self.logit_bits!r}")

    @property
    def sum_bits(self) -> int:
        """A row's sum ``l`` (``<= 255 * 2**e_max * max_row``)."""
        return sum_bits(self.max_row, self.cfg.e_max)

    @property
    def out_bits(self) -> int:
        """A normalized output ``O``: holds ``|acc| <= 128 * l`` (INT8 V)."""
        return bits_signed(128 << self.cfg.attn_out_frac_bits)

    @property
    def lanes(self) -> int:
        """``P``: keys per ``i_logit`` / ``o_p`` beat (``cfg.softmax_lanes``)."""
        return self.cfg.softmax_keys_per_cycle

    @property
    def row_words(self) -> int:
        """Beats (memory words of ``P`` logits) of the longest row."""
        return -(-self.max_row // self.lanes)

    @property
    def overlap(self) -> bool:
        """Rows follow each other through the exponent pass without draining it (``P > 1``;
        with one lane the unit keeps the schedule the engine's cycle model assumes)."""
        return self.lanes > 1

    @property
    def div_bits(self) -> int:
        """Quotient bits per divider cycle: ``min(P, DIV_BITS_MAX)``. The ``div_bits *
        div_steps - 17`` leading trials that give no quotient bit need ``L >= div_bits *
        div_steps - 16``, which ``l >= 255`` gives up to 8."""
        return min(self.lanes, self.DIV_BITS_MAX)

    @property
    def div_steps(self) -> int:
        """Divider cycles per row: ``ceil(17 / div_bits)``."""
        return -(-self.DIV_CYCLES // self.div_bits)

    def to_dict(self) -> dict:
        names = ["logit_bits", "max_row", "acc_bits", "sum_bits", "out_bits", "lanes",
                 "row_words", "div_bits", "div_steps", "EXP_STAGES", "DIV_CYCLES",
                 "NORM_STAGES"]
        return {n: getattr(self, n) for n in names}


@dataclass(frozen=True)
class AttentionGeometry:
    """Sizes of the attention engine of one head: the PE array's linear ``Geometry`` (``lin``),
    the memories, the tile and block counts and the widths of ``golden/ATTENTION.md``.
    Raises ``ConfigError`` for a configuration it cannot map.

    ``shared``: the engine runs on PE arrays it shares with the linear datapath
    (``dstar.hw.accelerator``), so the accumulator banks are also sized to hold the linear
    layer's ``Y`` (``Geometry(cfg).y_depth`` words across the four banks)."""
    cfg: Config
    shared: bool = False

    #: Sequencer cycles from a tile phase's last lane op until the PE array's last reduction
    #: is seen written: op -> psum queued -> reduction -> accumulator written -> seen.
    WAIT_CYCLES: ClassVar[int] = 4
    #: Cycles after the last accumulator read of NORM until the sequencer moves on:
    #: accumulator read, its register, the normalizer (``SoftmaxGeometry.NORM_STAGES``), output
    #: write, seen.
    NORM_DRAIN: ClassVar[int] = 5
    #: Cycles per row of ``SelReciprocal``: the masked sum, the 17 division steps, the write.
    SEL_RECIP_CYCLES: ClassVar[int] = 19
    #: Block masses ``MaskSelector`` compares per cycle of a scan.
    SEL_SCAN: ClassVar[int] = 4
    #: Width of the slots' step counters and of ``refresh``.
    REFRESH_BITS: ClassVar[int] = 16
    #: Width of the tile counters of a tile phase: only their differences (0 .. 2) matter,
    #: so they may wrap.
    TILE_COUNT_BITS: ClassVar[int] = 16

    def __post_init__(self):
        cfg, lin = self.cfg, self.lin
        g, dh, bc = cfg.group, cfg.head_dim, self.block_cols
        if bc % cfg.softmax_keys_per_cycle:
            raise ConfigError(f"softmax_lanes={cfg.softmax_lanes} must divide m_tile * n_arrays="
                              f"{bc} (a beat of logits is a slice of one accumulator chunk)")
        if dh % g:
            raise ConfigError(f"head_dim={dh} must be a multiple of group={g} (Q rows run as "
                              f"whole lane groups)")
        if dh > cfg.k_tile:
            raise ConfigError(f"head_dim={dh} must be <= k_tile={cfg.k_tile} (one K^T tile "
                              f"holds a head's reduction)")
        if cfg.block_k % g:
            raise ConfigError(f"block_k={cfg.block_k} must be a multiple of group={g}")
        if cfg.block_k % bc:
            raise ConfigError(f"block_k={cfg.block_k} must be a multiple of m_tile * n_arrays="
                              f"{bc} (key chunks of QK^T must not straddle key blocks)")
        if cfg.block_k > cfg.k_tile:
            raise ConfigError(f"block_k={cfg.block_k} must be <= k_tile={cfg.k_tile} (one V "
                              f"tile holds a key block)")
        self._check_attention_sums()
        if self.fmdq:
            self._check_fmdq()
        # A lane's PV partial sum runs over a key block's groups, a reduction over its keys.
        w_max = self.w_max
        if bits_signed(128 * w_max * self.kg_per_block) > lin.psum_bits:
            raise ConfigError(f"block_k={cfg.block_k}: a lane's PV partial sum (up to "
                              f"{128 * w_max * self.kg_per_block}) overflows the PE array's "
                              f"{lin.psum_bits}-bit partial sums")
        if bits_signed(128 * w_max * cfg.block_k) > lin.tile_sum_bits:
            raise ConfigError(f"block_k={cfg.block_k}: a PV tile's sum (up to "
                              f"{128 * w_max * cfg.block_k}) overflows the PE array's "
                              f"{lin.tile_sum_bits}-bit tile sums")

    def _check_fmdq(self) -> None:
        """``ConfigError`` for what QK^T and PV on the FMDQ arrays cannot map: a Q word holds
        a token tile's rows, a P bank one row of each tile, a unit's channels fit the weight
        window and its sum the PE accumulator, and no unit is shorter than its write-out."""
        cfg = self.cfg
        t, w = cfg.token_tile, cfg.sort_window
        if t & (t - 1):
            raise ConfigError(f"token_tile={t} must be a power of two for attention on the FMDQ "
                              f"arrays (a query row's P bank is its low bits)")
        if cfg.block_q % t:
            raise ConfigError(f"block_q={cfg.block_q} must be a multiple of token_tile={t}")
        if cfg.head_dim % 4:
            raise ConfigError(f"head_dim={cfg.head_dim} must be a multiple of 4 (SIMD-4 groups)")
        if max(cfg.head_dim, cfg.block_k) > w:
            raise ConfigError(f"head_dim={cfg.head_dim} and block_k={cfg.block_k} must be <= "
                              f"sort_window={w} (a K^T or V tile fills the weight window)")
        if min(cfg.head_dim, cfg.group) < t:
            raise ConfigError(f"head_dim={cfg.head_dim} and group={cfg.group} must be >= "
                              f"token_tile={t} (a unit no shorter than its write-out)")
        if cfg.group * 255 > w * 128:
            raise ConfigError(f"group={cfg.group}: a PV unit (group keys of 255 * 128) "
                              f"overflows the PE accumulators of sort_window={w}; group <= "
                              f"{w * 128 // 255} fits")

    def _check_attention_sums(self) -> None:
        """``ConfigError`` naming the field that sets the attention sum too wide for the
        accumulators (``max_tokens`` for the PV sums, ``head_dim`` for the logits), its largest
        value that fits, and the fields that widen the accumulators instead."""
        cfg, top = self.cfg, (1 << (self.cfg.acc_bits - 1)) - 1    # the largest |sum| held
        why = (f"the {cfg.acc_bits}-bit accumulators (acc_bits, set by max_k={cfg.max_k} and "
               f"state_bits={cfg.state_bits}: raise either to widen them)")
        if self.pv_acc_bits > cfg.acc_bits:
            fits = top // (128 * self.w_max)
            fix = (f"max_tokens <= {fits} fits at this e_max" if fits else "lower e_max")
            raise ConfigError(f"max_tokens={cfg.max_tokens} with e_max={cfg.e_max}: the "
                              f"attention's PV sums (max_tokens keys of up to 128 * 255 * "
                              f"2**e_max, {self.pv_acc_bits} bits) overflow {why}; {fix}")
        if self.logit_bits > cfg.acc_bits:
            raise ConfigError(f"head_dim={cfg.head_dim}: the attention's logits (up to head_dim "
                              f"* 128 * 128, {self.logit_bits} bits) overflow {why}; head_dim <= "
                              f"{top // (128 * 128)} fits")

    @property
    def lin(self) -> Geometry:
        """The PE arrays' geometry (the attention engine runs on the linear datapath's lanes),
        with accumulators of four banks of ``2**bank_bits`` words (logits, PV sums; one each per
        query-block parity) and two host readers."""
        return Geometry(self.cfg, y_words=4 << self.bank_bits, y_banks=4, y_readers=2)

    @property
    def softmax(self) -> SoftmaxGeometry:
        """The softmax unit's and the normalizer's geometry for this engine."""
        return SoftmaxGeometry(self.cfg, logit_bits=self.logit_bits, max_row=self.n_max,
                               acc_bits=self.pv_acc_bits)

    # ----- counts -----
    @property
    def block_cols(self) -> int:
        return self.cfg.m_tile * self.cfg.n_arrays

    @property
    def n_max(self) -> int:
        return self.cfg.max_tokens

    @property
    def rows_q(self) -> int:
        """Q words (lane groups) per query row."""
        return self.cfg.head_dim // self.cfg.group

    @property
    def n_kc(self) -> int:
        """Key chunks of K^T."""
        return -(-self.n_max // self.block_cols)

    @property
    def n_cp(self) -> int:
        """Column passes of PV."""
        return -(-self.cfg.head_dim // self.block_cols)

    @property
    def n_kg(self) -> int:
        """Key groups of P."""
        return -(-self.n_max // self.cfg.group)

    @property
    def nqb(self) -> int:
        return -(-self.n_max // self.cfg.block_q)

    @property
    def nkb(self) -> int:
        return -(-self.n_max // self.cfg.block_k)

    @property
    def kc_per_block(self) -> int:
        return self.cfg.block_k // self.block_cols

    @property
    def kg_per_block(self) -> int:
        return self.cfg.block_k // self.cfg.group

    @property
    def bank_bits(self) -> int:
        """Address bits of an accumulator bank: the logits (``block_q * n_kc`` words) or the
        PV sums ``S`` and ``U`` (``2 * block_q * n_cp``) of one query block."""
        bq = self.cfg.block_q
        own = max(1, (max(bq * self.n_kc, 2 * bq * self.n_cp) - 1).bit_length())
        if not self.shared:
            return own
        return max(own, (-(-Geometry(self.cfg).y_depth // 4) - 1).bit_length())

    def logit_base(self, parity):
        """The logits of a query block of ``parity`` in the accumulators (bank ``parity``);
        ``parity`` an int or an Amaranth value (then so is the address)."""
        return parity << self.bank_bits

    def s_base(self, parity):
        """PV sums ``S`` of a query block of ``parity`` (bank ``2 + parity``): its selected
        tiles."""
        return (2 + parity) << self.bank_bits

    def u_base(self, parity):
        """PV sums ``U``: the unselected tiles of a key step."""
        return self.s_base(parity) + self.cfg.block_q * self.n_cp

    # ----- widths -----
    @property
    def w_max(self) -> int:
        """Largest applied weight ``w = p << shift <= 255 * 2**e_max`` (golden.softmax group
        format)."""
        return 255 << self.cfg.e_max

    @property
    def logit_bits(self) -> int:
        return bits_signed(self.cfg.head_dim * 128 * 128)

    @property
    def pv_acc_bits(self) -> int:
        return bits_signed(128 * self.w_max * self.n_max)

    @property
    def b_bits(self) -> int:
        """A row's block sum of applied weights."""
        return sum_bits(self.cfg.block_k, self.cfg.e_max)

    @property
    def share_bits(self) -> int:
        """A row's share of a block, ``golden.softmax.block_fraction`` (16-bit fraction)."""
        return RECIP_BITS

    @property
    def mass_bits(self) -> int:
        """A block mass ``M``: the shares of ``block_q`` rows."""
        return self.share_bits + (self.cfg.block_q - 1).bit_length()

    @property
    def total_bits(self) -> int:
        """A query block's total mass ``T`` (and cumulative mass ``C``) over ``nkb`` blocks."""
        return self.mass_bits + (self.nkb - 1).bit_length()

    @property
    def theta_bits(self) -> int:
        """``theta_q`` port: ``1 .. 2**16`` (``2**16`` and above: every block)."""
        return THETA_BITS + 1

    @property
    def res_bits(self) -> int:
        """A residual ``R = O_full - O_sel``: both outputs lie in ``[-128, 127] * 2**f`` within
        one LSB (``f = attn_out_frac_bits``), so ``|R| <= 255 * 2**f + 2``."""
        return bits_signed((255 << self.cfg.attn_out_frac_bits) + 2)

    @property
    def out_bits(self) -> int:
        """An output word: ``O_full``, or ``O_sel + R`` on a reuse step (``|O| <= 383 * 2**f +
        3``)."""
        return bits_signed((383 << self.cfg.attn_out_frac_bits) + 3)

    @property
    def ms_bits(self) -> int:
        """A row multiplier ``(m, sh)`` word."""
        return SoftmaxGeometry.MANT_BITS + SoftmaxGeometry.SH_BITS

    # ----- memories -----
    @property
    def kt_depth(self) -> int:
        return self.cfg.head_dim * self.n_kc

    @property
    def v_depth(self) -> int:
        return self.n_kg * self.cfg.group * self.n_cp

    @property
    def fmdq(self) -> bool:
        """The engine runs on FMDQ PE arrays (``encoding = "fmdq"``,
        ``dstar.hw.attention.fmdq_tile_runner``)."""
        return self.cfg.encoding is Encoding.FMDQ

    @property
    def q_tokens(self) -> int:
        """Query rows per Q word: a token tile's (FMDQ: ``token_tile`` rows x 4 dimensions a
        word) or one (``G`` dimensions of one row)."""
        return self.cfg.token_tile if self.fmdq else 1

    @property
    def q_depth(self) -> int:
        if self.fmdq:
            return -(-self.n_max // self.q_tokens) * (self.cfg.head_dim // 4)
        return self.n_max * self.rows_q

    @property
    def p_banks(self) -> int:
        """P memories: FMDQ's PV reads a token tile's rows at once, row ``i`` of a query block
        in bank ``i mod token_tile``."""
        return self.q_tokens

    @property
    def p_depth(self) -> int:
        """Words of each P bank."""
        return self.cfg.block_q // self.p_banks * self.n_kg

    @property
    def o_depth(self) -> int:
        """Output words: ``block_cols`` columns of a row each (row ``i``'s at ``i * n_cp``)."""
        return self.n_max * self.n_cp

    @property
    def res_depth(self) -> int:
        """Residual words, as the output's, per slot."""
        return self.cfg.attn_slots * self.n_max * self.n_cp

    @property
    def mask_depth(self) -> int:
        return self.cfg.attn_slots * self.nqb

    # ----- SAR's score cache (attention = "sar") -----
    @property
    def sar(self) -> bool:
        """The engine runs the paper's sparse attention reuse (``attention = "sar"``): host-loaded
        masks, a score cache instead of the residual cache, PV-only reuse steps."""
        return self.cfg.attention is Attention.SAR

    @property
    def sc_rows(self) -> int:
        """Rows of a slot in the score cache: every query row of ``max_tokens``, rounded up to
        whole query blocks (dense per slot: a row's words sit at fixed addresses whatever the
        mask, so a host-loaded mask never moves them)."""
        return self.nqb * self.cfg.block_q

    @property
    def sc_depth(self) -> int:
        """Words of each score-cache P bank (``p_banks`` of them, row ``i`` in bank ``i mod
        p_banks``): ``n_kg`` P words per row, ``sc_rows`` rows per slot, ``attn_slots`` slots."""
        return self.cfg.attn_slots * self.sc_rows // self.p_banks * self.n_kg

    @property
    def rl_depth(self) -> int:
        """Words of the score cache's row memory: a row's reciprocal ``(r, L)``, per slot."""
        return self.cfg.attn_slots * self.sc_rows

    def score_cache_bits(self) -> int:
        """Bits of the score cache (every slot): P words (``G`` 8-bit ``p`` and a shift) of
        every row and key group, and ``(r, L)`` of every row."""
        p_word = 8 * self.cfg.group + self.cfg.shift_bits
        row = RECIP_BITS + 1 + uwidth(sum_bits(self.n_max, self.cfg.e_max) + 1)
        return self.sc_depth * self.p_banks * p_word + self.rl_depth * row

    def memories(self) -> dict[str, int]:
        """Words of the engine's memories, by what they hold and the fields that size them."""
        n = self.cfg.n_arrays
        out = {"Q, (m, sh), P and outputs (max_tokens x head_dim)":
               self.q_depth + self.n_max + self.p_depth + self.o_depth,
               "K^T and V (max_tokens x head_dim, per array)": n * (self.kt_depth + self.v_depth),
               "residual cache (attn_slots x max_tokens x head_dim)": self.res_depth,
               "masks (attn_slots x max_tokens / block_q)": self.mask_depth,
               "logits (2 x max_tokens)": 2 * self.n_max,
               "accumulators (4 banks of block_q x max(n_kc, 2 n_cp), per array)":
               n * self.lin.y_depth}
        if self.sar:
            del out["residual cache (attn_slots x max_tokens x head_dim)"]
            out["Q, (m, sh), P and outputs (max_tokens x head_dim)"] -= self.p_depth
            out["score cache P words (attn_slots x max_tokens x max_tokens / group)"] = (
                self.sc_depth * self.p_banks)
            out["score cache (r, L) (attn_slots x max_tokens)"] = self.rl_depth
        return out

    @property
    def host_addr_bits(self) -> int:
        """The shared host write address of the engine's memories."""
        if self.sar:
            return uwidth(max(self.q_depth, self.kt_depth, self.v_depth, self.n_max,
                              self.sc_depth * self.p_banks, self.rl_depth, self.mask_depth,
                              self.cfg.attn_slots))
        return uwidth(max(self.q_depth, self.kt_depth, self.v_depth, self.n_max,
                          self.res_depth, self.mask_depth, self.cfg.attn_slots))

    def to_dict(self) -> dict:
        names = ["block_cols", "n_max", "rows_q", "q_tokens", "n_kc", "n_cp", "n_kg", "nqb", "nkb",
                 "kc_per_block", "kg_per_block", "bank_bits", "logit_bits", "pv_acc_bits",
                 "kt_depth", "v_depth", "q_depth", "p_depth", "o_depth", "res_depth",
                 "mask_depth", "b_bits", "mass_bits"]
        if self.sar:
            names = [n for n in names if n != "res_depth"] + ["sar", "p_banks", "sc_rows",
                                                             "sc_depth", "rl_depth"]
        return {n: getattr(self, n) for n in names}

    def addresses(self) -> dict[str, str]:
        """The address rule of each memory the host loads or reads (by the memory's name: ``q``,
        ``kt``, ... as in ``dstar.hw.attention.layouts.memory_layouts``; SAR: ``sc`` and ``rl``
        instead of ``res``), an expression in the names of ``to_dict()`` and ``config``: the one
        statement of them, which the engine's manifest and the accelerator's (``Mem``) share. In
        the arrays' memories (``kt``, ``v``) array ``a`` holds the ``m_tile`` keys or columns from
        ``a * m_tile`` on of the word's ``block_cols``."""
        rules = {
            "q": (_Q_TILE if self.fmdq else "i * rows_q + r (elements r * group ..)"),
            "kt": "d * n_kc + kc (keys kc * block_cols ..; array a: kc * block_cols + a * m_tile "
                  "..)",
            "v": "j * n_cp + cp (columns cp * block_cols ..; array a: cp * block_cols + a * "
                 "m_tile ..)",
            "ms": "i",
            "o": "i * n_cp + cp (columns cp * block_cols ..)",
            "res": "(slot * n_max + i) * n_cp + cp (columns cp * block_cols ..)",
            "mask": "slot * nqb + I, bit J: key block J selected for query block I",
            "slot": "slot (valid: stepped since the slots were cleared or reset; phase: calls "
                    "mod refresh)",
        }
        if self.sar:            # the score cache instead of the residual cache
            del rules["res"]
            rules.update(_SAR_ADDRESSES)
        return rules

    def sections(self) -> dict:
        """The engine's manifest sections beyond ``geometry``: ``softmax`` (its
        ``SoftmaxGeometry``) and ``addresses``."""
        return {"softmax": self.softmax.to_dict(), "addresses": self.addresses()}


#: The Q address rule of the engine on the FMDQ arrays (a word: 4 dimensions of a token tile).
_Q_TILE = ("(i // q_tokens) * head_dim / 4 + c (rows of the token tile, dimensions 4c .., "
           "element [t][d]: row t of the tile)")
#: SAR's memories (``attention = "sar"``: no residual cache; the score cache, dense per slot).
_SAR_ADDRESSES = {
    "mask": "slot * nqb + I, bit J: key block J kept for query block I (the host's; the engine "
            "only reads it)",
    "sc": "((slot * sc_rows + i) // p_banks * n_kg + kg) * p_banks + i % p_banks: the P word of "
          "row i, key group kg",
    "rl": "slot * sc_rows + i: (r, L) of row i",
}
