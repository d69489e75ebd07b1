"""Simulation side of the RTL: cycle models, testbenches and benchmarks.

Linear datapath: memory-image packing and the step driver shared by the Amaranth-simulator and
cocotb testbenches (``layer_io``, ``pysim_driver``), the exact cycle model (``cycle_model``;
``layer_cycles`` picks it or the dense baseline's ``dense_cycles`` by ``Config.datapath``),
activation traces of the bundled DiT (``traces``), cocotb testbench modules (``tb_linear``,
``tb_dispatcher``), the board self-test's program and simulation (``selftest``) and the
benchmarks behind ``dstar bench`` (``bench``, ``bench_attention``, ``bench_golden``).
"""
