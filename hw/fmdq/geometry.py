"""Sizes of the FMDQ linear datapath (``dstar.hw.fmdq.linear.FmdqLinear``) derived from a
``Config``: the one place the RTL, its cycle model, the tests and the manifest take them from.
Amaranth-free, like ``dstar.hw.geometry``.

Memory organisation (the quantization unit reads *sub-channels*: one channel over a token tile's
``T`` tokens, ``docs/design/fmdq-qu.md``):

* target and state: not stored; a step streams them in, a sub-channel per beat (``T`` signed
  ``state_bits`` integers each, token ``t`` of the tile at element ``t``) in ``beats`` order,
  and streams the new state out in the same order (the differential state lives with the host,
  off chip, as in the paper's design);
* weights, one memory per array: ``max_k * n_mt_max`` words of ``m_tile`` INT8, row ``k`` of
  column block ``mt`` at ``w_base + mt * K + k`` (``K`` the run's: the blocks are packed);
* accumulators ``Y``, one per array: ``max_tokens * n_mt_max`` words of ``m_tile`` signed
  ``y_bits`` integers, token ``n`` of column block ``mt`` at ``n * n_mt_max + mt`` (v1's rule);
* groups: two banks, each the quantization unit's output for one sort window (every token
  tile's unit, ``bank_depth`` entries, ``unit_groups_max`` per unit), replayed for every column
  block from one bank while the next window is encoded into the other (``group_depth`` entries
  in all).
"""

from dataclasses import dataclass

from dstar.config import Config, ConfigError, bits_signed
from dstar.golden.fmdq import LANES, MAX_SLICES, SLICE_BITS
from dstar.golden.fmdq_pe import acc_bits

from ..geometry import AttentionGeometry, uwidth

__all__ = ["FmdqGeometry", "unit_groups_max", "attention_array_args"]


def unit_groups_max(window: int, e_max: int) -> int:
    """Most groups one unit (a tile's sub-channels of one sort window) can issue: its
    ``4 * window`` slices in runs of ``S <= e_max + 7`` distinct total shifts, each run rounded
    up to whole groups of 4: ``sum ceil(c_s / 4) <= window + 3 S / 4``."""
    distinct = min(e_max + SLICE_BITS * (MAX_SLICES - 1) + 1, MAX_SLICES * window)
    return window + (LANES - 1) * distinct // LANES


@dataclass(frozen=True)
class FmdqGeometry:
    """The FMDQ linear datapath's sizes for ``cfg`` (``token_tile`` T, ``sort_window`` W,
    ``m_tile`` columns per array, ``n_arrays``)."""
    cfg: Config

    def __post_init__(self):
        w = self.cfg.sort_window
        if w < 2 or w & (w - 1):
            raise ConfigError(f"sort_window={w} must be a power of two >= 2 for the FMDQ "
                              f"PE array's weight window")

    @property
    def tokens(self) -> int:
        return self.cfg.token_tile

    @property
    def window(self) -> int:
        return self.cfg.sort_window

    @property
    def columns(self) -> int:
        return self.cfg.m_tile

    @property
    def block_cols(self) -> int:
        """Output columns of one column block (every array's)."""
        return self.cfg.m_tile * self.cfg.n_arrays

    @property
    def n_tiles_max(self) -> int:
        return -(-self.cfg.max_tokens // self.tokens)

    @property
    def n_win_max(self) -> int:
        return -(-self.cfg.max_k // self.window)

    @property
    def n_mt_max(self) -> int:
        return -(-self.cfg.max_m // self.block_cols)

    @property
    def channel_bits(self) -> int:
        """Holds every channel index and every window's first channel plus ``window - 1``."""
        return uwidth(self.n_win_max * self.window)

    @property
    def diff_bits(self) -> int:
        """Signed width of a difference ``target - Xs``."""
        return bits_signed(self.cfg.target_max + self.cfg.state_max)

    def beats(self, n_tokens: int, n_k: int) -> list[tuple[int, int]]:
        """The ``(tile, channel)`` of each beat of a step's target and state streams, in order:
        windows outer, token tiles, channels inner."""
        n_tiles = -(-n_tokens // self.tokens)
        return [(tile, k) for j0 in range(0, n_k, self.window) for tile in range(n_tiles)
                for k in range(j0, min(j0 + self.window, n_k))]

    @property
    def weight_depth(self) -> int:
        return self.cfg.max_k * self.n_mt_max

    @property
    def y_depth(self) -> int:
        return self.cfg.max_tokens * self.n_mt_max

    @property
    def y_bits(self) -> int:
        """Accumulator width: the layer's bound and at least a unit's sum."""
        return max(self.cfg.acc_bits, acc_bits(self.window, self.cfg.e_max))

    @property
    def bank_depth(self) -> int:
        """Entries of one bank of the group memory: every unit of one window at its most
        groups."""
        return self.n_tiles_max * unit_groups_max(self.window, self.cfg.e_max)

    @property
    def group_depth(self) -> int:
        """Entries of the group memory: two banks (a window is encoded into one while the
        previous one replays from the other)."""
        return 2 * self.bank_depth

    def memories(self) -> dict[str, int]:
        """Words of each memory of the top (for ``dstar.hw.generate.check_buildable``)."""
        n = self.cfg.n_arrays
        return {"slice groups (2 banks x max_tokens / token_tile x a window's most groups)":
                self.group_depth,
                "weights (max_k x max_m / block_cols, per array)": n * self.weight_depth,
                "accumulators (max_tokens x max_m / block_cols, per array)": n * self.y_depth,
                "weight window (2 x sort_window, per array)": n * 2 * self.window}

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in (
            "tokens", "window", "columns", "block_cols", "n_tiles_max", "n_win_max", "n_mt_max",
            "channel_bits", "diff_bits", "weight_depth", "y_depth", "y_bits",
            "bank_depth", "group_depth")}


def attention_array_args(cfg: Config, shared: bool) -> dict:
    """``FmdqPEArray``'s parameters when the attention engine runs on the arrays
    (``dstar.hw.attention``): the linear datapath's sizes, accumulators of the engine's four
    banks (``AttentionGeometry(cfg, shared)``: with ``shared`` they also hold a linear layer's
    ``Y``), per-token shifts, per-unit row steps and the engine's two readers."""
    geo = FmdqGeometry(cfg)
    return dict(tokens=geo.tokens, columns=geo.columns, window=geo.window, e_max=cfg.e_max,
                channel_bits=geo.channel_bits,
                y_depth=AttentionGeometry(cfg, shared=shared).lin.y_depth, y_bits=geo.y_bits,
                token_shifts=True, y_steps=True, readers=2)
