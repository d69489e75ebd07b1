"""Synthesis of the generated RTL with YoWASP Yosys and nextpnr: area, FPGA resources, Fmax,
committed area baselines and an ECP5 board build.

``flows`` runs one Yosys flow on one module (cmos, ice40, ecp5, ecp5_dsp, xc7); ``report`` runs
them per block of a configuration and writes the versioned JSON report (``report.run``,
``report.format_table``; ``python -m synth.report``); ``fmax`` places and routes an ECP5 netlist
out of context; ``baseline`` stores and compares ``baselines/<preset>.json``; ``board`` builds
the self-test bitstream for a ULX3S 85F (``board.build()``).
"""
