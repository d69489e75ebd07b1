"""Hardware sizes derived from a ``Config``: the one place the RTL, the cycle model and the
manifest take them from.

A layer run is cut into *passes*: one weight tile of ``k_tile`` reduction rows by
``n_arrays * m_tile`` output columns (array ``a`` holds columns ``a*m_tile .. (a+1)*m_tile-1`` of
the pass's column block). Within a pass every token contributes one *slice*: its ``k_tile``
elements of the pass's K range, i.e. ``slice_groups`` encoded groups. Lane ``l`` of every array
owns element ``l`` of each group (``k = j*G + l``).
"""

from dataclasses import dataclass

from dstar.golden.dispatch import STRATEGIES

from dstar.config import Config, ConfigError, bits_signed

__all__ = ["Geometry", "uwidth", "DEFAULT_LANE_ROTATION"]

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
    in ``dstar.hw.dispatcher``)."""
    cfg: Config

    def __post_init__(self):
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
        """Words of each array's weight memory: ``max_k * n_mt_max`` rows of ``m_tile`` INT8,
        address ``k * n_mt_max + mt``."""
        return self.cfg.max_k * self.n_mt_max

    @property
    def y_depth(self) -> int:
        """Words of each array's accumulator memory: ``max_tokens * n_mt_max`` rows of
        ``m_tile`` accumulators, address ``token * n_mt_max + mt``."""
        return self.cfg.max_tokens * self.n_mt_max

    @property
    def psum_depth(self) -> int:
        """Per-lane partial-sum queue: how many slices a lane may run ahead of the reduction."""
        return self.cfg.lane_fifo_depth

    def to_dict(self) -> dict:
        names = ["lanes", "rotation", "excess_max", "slice_groups", "block_cols",
                 "n_kt_max", "n_mt_max", "target_bits", "delta_bits", "op_shift_bits",
                 "token_bits", "row_bits", "psum_bits",
                 "tile_sum_bits", "acc_bits", "row_depth", "weight_depth", "y_depth",
                 "psum_depth"]
        return {n: getattr(self, n) for n in names}
