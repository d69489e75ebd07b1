"""Amaranth 0.5 RTL of DSTAR (spec section 5).

``geometry`` derives every hardware size of every top from a ``dstar.config.Config`` (and
imports no Amaranth). Linear datapath: ``layouts`` holds the stream payload layouts;
``encoder``, ``dispatcher``, ``pe_array`` and ``linear`` are the blocks; ``dense`` is the dense
INT8 baseline. Attention: ``softmax`` (softmax unit, normalizer) and the ``attention`` package
(engine, tile runner, softmax feed, mask selector, norm stage). ``generate`` writes
deterministic Verilog plus ``params.json`` from each top's ``geometry`` and ``layouts()``.
``board``: the self-test gateware and its ULX3S 85F top.
"""
