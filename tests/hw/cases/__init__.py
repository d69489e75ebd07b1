"""The cases of the hardware tests, one module per block: the stimulus and the golden expected
results, built once and shared by the Amaranth-simulator tier (``tests/hw/test_*.py``) and the
cocotb-on-Icarus tier (``tests/hw/test_*_icarus.py``). These modules hold no tests."""
