"""Board gateware: the self-test that runs a stored workload on ``dstar_linear`` and compares
the result (``selftest``), and its top for the ULX3S 85F (``ulx3s``: PLL, LEDs, button).

The ROM program comes from ``dstar.sim.selftest`` (the memory images of the host driver); the
bitstream build and its timing report from ``dstar.synth.board``.
"""
