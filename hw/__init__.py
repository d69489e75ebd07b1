"""Amaranth 0.5 RTL of DSTAR (spec section 5).

Linear datapath: ``geometry`` derives every hardware size from a ``dstar.config.Config``;
``layouts`` holds the stream payload layouts; ``encoder``, ``dispatcher``, ``pe_array`` and
``linear`` are the blocks; ``generate`` writes deterministic Verilog plus ``params.json``.
``board``: the self-test gateware and its ULX3S 85F top.
"""
