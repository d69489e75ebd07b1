"""The host side of an FMDQ linear step on the accelerator top (``encoding = "fmdq"``:
``dstar.hw.fmdq.linear.FmdqLinear`` behind the command stream), from its manifest only: the
memory images (``FmdqImage``'s words, in the manifest's layouts) and the step's commands
through ``dstar.sim.accel_io``. ``FmdqLinearStep`` has ``accel_io.LinearStep``'s interface, so
the host (``dstar.sim.host``) runs either encoding's layers alike."""

import numpy as np

from .accel_io import load, read, run
from .fmdq_linear_io import FmdqImage, _pack, _unpack

__all__ = ["FmdqLinearStep", "linear_step_of"]


class FmdqLinearStep:
    """One FMDQ differential linear layer (``K`` x ``M``, ``N`` tokens) on the accelerator
    (``man``: its manifest's ``accelerator`` section)."""

    def __init__(self, man: dict, k: int, m: int, n: int):
        cfg = man["config"]
        self.man = man
        self.img = FmdqImage(man["geometry"], cfg["state_bits"], cfg["max_k"], k, m, n)

    @property
    def weight_span(self) -> int:
        return self.img.weight_span

    def y_words(self, y) -> dict[int, int]:
        """``y`` (N, M) -> {address: accumulator word} (a saved Y, to restore)."""
        img, g = self.img, self.img.geo
        bc = g["block_cols"]
        pad = np.zeros((img.n, img.n_mt * bc), np.int64)
        pad[:, :img.m] = y
        return {t * g["n_mt_max"] + mt: _pack(pad[t, mt * bc:(mt + 1) * bc], g["y_bits"])
                for t in range(img.n) for mt in range(img.n_mt)}

    def y_addrs(self) -> list[int]:
        g = self.img.geo
        return [t * g["n_mt_max"] + mt for t in range(self.img.n) for mt in range(self.img.n_mt)]

    async def run(self, io, target, *, key: bool, w_q=None, w_base: int = 0, state=None,
                  y=None):
        """Load (weights at ``w_base`` if given, state and ``Y`` if given; targets), run the
        step, read ``Y`` and the state back; returns ``(y, state)``."""
        img, man, g = self.img, self.man, self.img.geo
        if w_q is not None:
            await load(io, man, "WEIGHTS", img.weight_words(w_q, w_base))
        t_words = img.sub_words(target)
        await load(io, man, "TARGET", t_words)
        if state is not None:
            await load(io, man, "STATE", img.sub_words(state))
        if y is not None:
            await load(io, man, "Y", self.y_words(y))
        await run(io, man, "RUN_LINEAR", n_tokens=img.n, n_k=img.k, n_mt=img.n_mt,
                  key=int(key), w_base=w_base)
        s_words = await read(io, man, "STATE", list(t_words))
        y_words = await read(io, man, "Y", self.y_addrs())
        bc, t = g["block_cols"], g["tokens"]
        y_out = np.zeros((img.n, img.n_mt * bc), np.int64)
        for r in range(img.n):
            for mt in range(img.n_mt):
                y_out[r, mt * bc:(mt + 1) * bc] = _unpack(y_words[r * g["n_mt_max"] + mt], bc,
                                                          g["y_bits"])
        xs = np.zeros((img.n, img.k), np.int64)
        for tile in range(-(-img.n // t)):
            rows = range(tile * t, min((tile + 1) * t, img.n))
            for c in range(img.k):
                vals = _unpack(s_words[tile * img.max_k + c], t, img.state_bits)
                xs[rows.start:rows.stop, c] = vals[:len(rows)]
        return y_out[:, :img.m], xs


def linear_step_of(man: dict):
    """The linear step class of a manifest's ``accelerator`` section: ``FmdqLinearStep`` with
    ``encoding = "fmdq"``, else ``accel_io.LinearStep``."""
    from .accel_io import LinearStep

    return FmdqLinearStep if man["config"].get("encoding") == "fmdq" else LinearStep
