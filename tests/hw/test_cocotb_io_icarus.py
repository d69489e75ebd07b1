"""The cocotb port adapter bounds its waits: a design that never raises the port a driver waits
for fails its test after the bound (``until``'s ``max_cycles``), instead of simulating until the
job's time limit (``tests/hw/tb_until.py``, on a hand-written counter, on Icarus)."""

from dstar.paths import build_dir
from tests.hw.fixtures import need_iverilog, run_icarus

COUNTER = """module counter(input clk, input go, output done);
  reg [7:0] n = 8'd0;
  always @(posedge clk) if (go && n != 8'hff) n <= n + 8'd1;
  assign done = go & (n >= 8'd20);
endmodule
"""


def test_until_is_bounded():
    need_iverilog()
    out = build_dir("cocotb") / "until"
    out.mkdir(parents=True, exist_ok=True)
    (out / "counter.v").write_text(COUNTER)
    run_icarus(out, "counter", "tests.hw.tb_until", {}, build="icarus")
