"""The accelerator top as an engine of the host (``dstar.golden.host.BlockHost``):
``AcceleratorEngine`` runs each linear step and attention step the host hands it on the top,
through ``dstar.sim.accel_io`` on any simulator's ``(set, get, tick)`` adapter. Rows beyond
``max_tokens`` run in chunks; each layer's state and accumulators are saved and restored around
other layers' steps, its weights loaded once and kept while the weight memory has room for the
others'; each (batch element, head) has a host attention slot, kept in the top's slot ``host
slot % attn_slots`` and saved and restored when another host slot needs it (v1: its step
counter, residual and mask; SAR: its step counter, score cache and mask).

The host, its golden engine and ``run_sync`` live in ``dstar.golden.host`` (they need only the
golden model) and are importable from here too.
"""

import numpy as np

from dstar.golden.attention import theta_fixed
from dstar.golden.host import BlockHost, GoldenEngine, HeadLoop, run_sync
from dstar.golden.schedule import is_key_step

from .accel_io import AttentionStep, counters
from .fmdq_accel_io import linear_step_of

__all__ = ["AcceleratorEngine", "BlockHost", "GoldenEngine", "run_sync"]


class AcceleratorEngine(HeadLoop):
    """The accelerator top through ``dstar.sim.accel_io`` (``io``: a ``(set, get, tick)``
    adapter of a reset design, ``man``: its manifest's ``accelerator`` section), attention at
    ``cfg``'s ``theta`` and ``refresh_attn``. ``runs`` lists the counters (``READ_COUNTERS``,
    by name) after each run command, in order."""

    def __init__(self, io, man: dict, cfg):
        self.io, self.man, self.cfg = io, man, cfg
        self.runs: list[dict] = []
        self.max_rows = man["config"]["max_tokens"]
        self.saved: dict[tuple, tuple] = {}       # (layer, chunk) -> (state, Y)
        self.w_base: dict[str, int] = {}          # layer -> where its weights are loaded
        self.w_free = 0                           # the first weight word no layer holds
        self.resident: dict[int, int] = {}        # the top's slot -> the host slot in it
        self.parked: dict[int, dict] = {}         # host slot -> its saved state
        self.rows: dict[int, int] = {}            # host slot -> its N
        self.calls: dict[int, int] = {}           # host slot -> steps run

    async def linear(self, name: str, w_q, target, key: bool):
        n, k = target.shape
        ys = []
        for c, r0 in enumerate(range(0, n, self.max_rows)):
            rows = target[r0:r0 + self.max_rows]
            step = linear_step_of(self.man)(self.man, k, w_q.shape[1], rows.shape[0])
            state, y = (None, None) if key else self.saved[(name, c)]
            w = None if name in self.w_base else w_q
            y_int, xs = await step.run(self.io, rows, key=key, w_q=w,
                                       w_base=self._weights_at(name, step.weight_span),
                                       state=state, y=y)
            self.runs.append(await counters(self.io, self.man))
            self.saved[(name, c)] = (xs, y_int)
            ys.append(y_int)
        return np.concatenate(ys)

    def _weights_at(self, name: str, span: int) -> int:
        """Where layer ``name``'s weights (``span`` words) are, or go: after the last layer
        loaded, or, when the memory is full, from address 0 on again (the layers there
        forgotten)."""
        if name not in self.w_base:
            if self.w_free + span > self.man["memories"]["WEIGHTS"]["depth"]:
                self.w_base, self.w_free = {}, 0
            self.w_base[name] = self.w_free
            self.w_free += span
        return self.w_base[name]

    async def attention(self, slot: int, q, k, v, m, sh, mask=None):
        """One attention step of the host's slot ``slot`` on the top's slot ``slot %
        attn_slots``, whose state (step counter, residual or score cache, mask) is saved and
        restored when another host slot had it. SAR: ``mask`` (a cache step's) is loaded into
        the slot's ``MASK`` words before the run; ``None`` arguments are not loaded (a reuse
        step needs V only)."""
        phys = slot % self.man["config"]["attn_slots"]
        step = AttentionStep(self.man, v.shape[0])
        owner = self.resident.get(phys)
        if owner != slot:
            if owner is not None:
                self.parked[owner] = await AttentionStep(self.man, self.rows[owner]).save_slot(
                    self.io, phys, counter_only=self._next_is_key(owner))
            saved = self.parked.pop(slot, None)
            if saved is None:                   # a fresh slot: its first step is a key step
                saved = {"SLOT": {phys: step.slot_word(False, 0)}}
            await step.restore_slot(self.io, saved)
            self.resident[phys] = slot
        o, _, _, cnt = await step.run(
            self.io, q, k, v, m, sh, slot=phys, theta_q=theta_fixed(self.cfg.theta),
            refresh=self.cfg.refresh_attn, read_state=False, mask=mask)
        self.runs.append(cnt)
        self.rows[slot] = v.shape[0]
        self.calls[slot] = self.calls.get(slot, 0) + 1
        return o, bool(cnt["attention_key"])

    def _next_is_key(self, slot: int) -> bool:
        return is_key_step(self.calls.get(slot, 0), self.cfg.refresh_attn)
