"""The host side of an FMDQ linear step on the accelerator top (``encoding = "fmdq"``:
``dstar.hw.fmdq.linear.FmdqLinear`` behind the command stream), from its manifest only: the
memory images (``FmdqImage``'s words, in the manifest's layouts), the step's commands through
``dstar.sim.accel_io`` and its target and state streamed through ``din`` / ``dout`` during the
run. ``FmdqLinearStep`` has ``accel_io.LinearStep``'s interface, so
the host (``dstar.sim.host``) runs either encoding's layers alike."""

import numpy as np

from .accel_io import command, load, read, send
from .fmdq_linear_io import FmdqImage, _pack, _unpack, stream_step

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
        """Load (weights at ``w_base`` and ``Y`` if given), run the step with the target and
        the old ``state`` (None: zeros) streamed in and the new state streamed out, read ``Y``
        back; returns ``(y, state)``."""
        img, man = self.img, self.man
        if w_q is not None:
            await load(io, man, "WEIGHTS", img.weight_words(w_q, w_base))
        if y is not None:
            await load(io, man, "Y", self.y_words(y))
        _, get, _ = io
        args = dict(n_tokens=img.n, n_k=img.k, n_mt=img.n_mt, key=int(key), w_base=w_base)
        refused_before = get("error")
        await send(io, "cmd", [command(man, "RUN_LINEAR", **args)])
        if get("error") and not refused_before:
            raise ValueError(f"RUN_LINEAR {args}: refused by the top (error set)")
        beats = img.sub_beats(target, state)
        s_words = await stream_step(io, beats, len(beats), "din", "dout", lambda: get("busy"))
        return self.y_from(await read(io, man, "Y", self.y_addrs())), img.state_from(s_words)

    def y_from(self, words: dict[int, int]) -> np.ndarray:
        """``Y`` ``(N, M)`` from the words of ``y_addrs`` ({address: word})."""
        img, g = self.img, self.img.geo
        bc = g["block_cols"]
        y = np.zeros((img.n, img.n_mt * bc), np.int64)
        for r in range(img.n):
            for mt in range(img.n_mt):
                y[r, mt * bc:(mt + 1) * bc] = _unpack(words[r * g["n_mt_max"] + mt], bc,
                                                      g["y_bits"])
        return y[:, :img.m]


def linear_step_of(man: dict):
    """The linear step class of a manifest's ``accelerator`` section: ``FmdqLinearStep`` with
    ``encoding = "fmdq"``, else ``accel_io.LinearStep``."""
    from .accel_io import LinearStep

    return FmdqLinearStep if man["config"].get("encoding") == "fmdq" else LinearStep
