"""The machine every design of ``dstar report`` runs on: the paper's configuration by default
(32 cores of 64 x 64 SIMD-4 2b x 8b PEs, 1 GHz: 262 INT8 TOPS; HBM2 at 1.5 TB/s; a 512 KB
scratchpad; eval-anchors.md 1.2, [S 3/4-4/4]), or a given one (``--machine KEY=VALUE``).

Every baseline accelerator gets the same peak INT8 throughput (``macs_per_cycle`` 8-bit MACs per
cycle), the same memory system and the same scratchpad (the paper's rule: TOPS-matched); with
``equal_area`` a design's PE count is scaled instead so that its PE arrays take the INT8 array's
area (``report_energy.AREA_PER_MAC``)."""

from dataclasses import asdict, dataclass, fields

__all__ = ["Machine", "ReportError", "parse_machine"]


class ReportError(ValueError):
    """Bad input of ``dstar report``: one line naming the value."""


@dataclass(frozen=True)
class Machine:
    cores: int = 32
    rows: int = 64          # PE rows of a core: output columns of one tile
    cols: int = 64          # PE columns: the tile's tokens
    ghz: float = 1.0
    hbm_tbs: float = 1.5
    sram_kb: int = 512      # on-chip scratchpad, whole chip
    x_bits: int = 8         # differential state X_{t-1}, per value
    y_bits: int = 16        # differential state Y_{t-1}, per value
    act_bits: int = 8       # activations that spill
    node_nm: int = 7        # logic and SRAM energy reported at this node

    @property
    def macs_per_cycle(self) -> int:
        return self.cores * self.rows * self.cols

    @property
    def peak_int8_tops(self) -> float:
        return 2 * self.macs_per_cycle * self.ghz / 1e3

    def to_dict(self) -> dict:
        return {**asdict(self), "macs_per_cycle": self.macs_per_cycle,
                "peak_int8_tops": round(self.peak_int8_tops, 3)}


_LIMITS = {"cores": (1, 4096), "rows": (1, 1024), "cols": (1, 1024), "ghz": (0.01, 10.0),
           "hbm_tbs": (0.001, 100.0), "sram_kb": (0, 1 << 30), "x_bits": (1, 32),
           "y_bits": (1, 32), "act_bits": (1, 32), "node_nm": None}


def parse_machine(items) -> Machine:
    """A ``Machine`` from ``KEY=VALUE`` strings; ``ReportError`` names a bad key or value."""
    from .report_energy import NODE_ENERGY
    types = {f.name: f.type for f in fields(Machine)}
    over = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or key not in types:
            raise ReportError(f"--machine {item!r}: unknown key {key!r} (keys: "
                              f"{', '.join(types)})")
        try:
            v = float(text) if types[key] in (float, "float") else int(text)
        except ValueError:
            raise ReportError(f"--machine {key}={text!r}: not a number") from None
        lim = _LIMITS[key]
        if lim is None:
            if v not in NODE_ENERGY:
                raise ReportError(f"--machine node_nm={text!r}: one of {sorted(NODE_ENERGY)}")
        elif not lim[0] <= v <= lim[1]:
            raise ReportError(f"--machine {key}={text!r}: outside {lim[0]} .. {lim[1]}")
        over[key] = v
    return Machine(**over)
