"""``dstar bench tests``: the test command's wall time, counts and slowest tests."""

from dstar import bench_tests


def test_parse_reads_the_summary_and_the_slowest_tests():
    out = ("12.50s call     tests/hw/test_a.py::test_x[1]\n"
           "3.00s setup    tests/hw/test_b.py::test_y\n"
           "==== 2 failed, 600 passed, 3 skipped, 40 deselected in 1232.14s (0:20:32) ====\n")
    got = bench_tests._parse(out)
    assert got["counts"] == {"failed": 2, "passed": 600, "skipped": 3, "deselected": 40}
    assert got["pytest_reported_s"] == 1232.14
    assert got["slowest"][0] == {"seconds": 12.5, "when": "call",
                                 "test": "tests/hw/test_a.py::test_x[1]"}
    assert bench_tests._parse("no summary here")["counts"] == {}


def test_run_in_the_checkout_reports_a_real_pytest_run(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text("def test_pass():\n    pass\n\n\ndef test_fail():\n    assert 0\n")
    rep = bench_tests.run_tests(pytest_args=("-o", "addopts=", "-p", "no:xdist", "-q",
                                             "-p", "no:cacheprovider", "--durations=3",
                                             "--durations-min=0", str(probe)))
    assert rep["exit_code"] == 1 and not rep["clone"]
    assert rep["counts"] == {"passed": 1, "failed": 1}
    assert rep["pytest_wall_s"] > 0 and rep["slowest"]
    text = bench_tests.format_report(rep)
    assert "the checkout" in text and "1 failed, 1 passed" in text.replace("1 passed, 1 failed",
                                                                        "1 failed, 1 passed")
