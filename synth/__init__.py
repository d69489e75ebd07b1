"""Synthesis of the generated RTL with YoWASP Yosys and nextpnr: area, FPGA resources, Fmax,
committed area baselines and an ECP5 board build (``dstar synth`` is the command line).

``flows`` runs one Yosys flow on one module (cmos, ice40, ecp5, ecp5_dsp, xc7); ``blocks``
splits a configuration's Verilog into blocks and synthesizes each; ``fmax`` places and routes
an ECP5 netlist out of context, ``fmax_runs`` chooses the netlists a report routes; ``report``
assembles the versioned JSON report (``report.run``) and ``tables`` prints it
(``tables.format_table``); ``baseline`` stores and compares ``baselines/<preset>.json``;
``strategy_area`` synthesizes each packing strategy's blocks; ``board`` builds the self-test
bitstream for a ULX3S 85F (``board.build()``, gateware in ``dstar.hw.board``).
"""
