"""``dstar analyze --sweep ... --plot FILE.png``: the PSNR-vs-work plot of a sweep report."""

import json
import struct
import zlib

import numpy as np

from dstar import analyze, plot
from dstar.analyze import format_sweep
from dstar.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def report(points=None):
    """A hand-built ``run_sweep`` report: W8A8 at 20 dB, target gap 0.5 dB at <= 50 %."""
    pts = points if points is not None else [
        {"theta": 0.5, "psnr_vs_fp32_db": 19.8, "blocks_computed_fraction_reuse_steps": 0.3,
         "meets_target": True},
        {"theta": 0.8, "psnr_vs_fp32_db": 17.0, "blocks_computed_fraction_reuse_steps": 0.8,
         "meets_target": False},
        {"theta": 1.0, "psnr_vs_fp32_db": 21.5, "blocks_computed_fraction_reuse_steps": 0.15,
         "meets_target": True},
    ]
    for p in pts:
        p.setdefault("psnr_gap_vs_w8a8_db", 20.0 - (p["psnr_vs_fp32_db"] or np.inf))
        p.setdefault("worst_sample_gap_vs_w8a8_db", 0.0)
        p.setdefault("blocks_computed_fraction", 0.9)
        p.setdefault("ops_ratio_vs_w8a8", 1.5)
    return {"workload": "test (sweep)", "steps": 4, "samples": 2, "config": {},
            "grid": {k: [p[k] for p in pts] for k in ("theta", "attention") if k in pts[0]},
            "w8a8": {"psnr_vs_fp32_db": 20.0},
            "target": {"psnr_gap_vs_w8a8_db": 0.5, "worst_sample_gap_vs_w8a8_db": 2.0,
                       "blocks_computed_fraction_reuse_steps": 0.5},
            "points": pts}


def decode(data: bytes) -> np.ndarray:
    """The pixels of a grayscale PNG of one IDAT chunk as ``png.png_bytes`` writes it."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h, depth, color = struct.unpack(">IIBB", data[16:26])
    assert (depth, color) == (8, 0)
    n = struct.unpack(">I", data[33:37])[0]
    assert data[37:41] == b"IDAT"
    raw = np.frombuffer(zlib.decompress(data[41:41 + n]), dtype=np.uint8).reshape(h, w + 1)
    assert not raw[:, 0].any()                  # filter type 0 on every row
    return raw[:, 1:]


def test_the_plot_has_its_size_and_is_deterministic():
    data = plot.sweep_png(report())
    img = decode(data)
    assert img.shape == (plot.HEIGHT, plot.WIDTH)
    assert (img == plot.sweep_image(report())).all()
    assert plot.sweep_png(json.loads(json.dumps(report()))) == data   # through JSON: same bytes
    moved = report()
    moved["points"][1]["psnr_vs_fp32_db"] = 18.0
    assert plot.sweep_png(moved) != data


def test_each_point_sits_where_the_axes_put_it_filled_if_it_meets_the_target():
    rep = report()
    img = plot.sweep_image(rep)
    ax = plot.sweep_axes(rep)
    assert ax.y0 <= 17.0 and ax.y1 >= 21.5 and (ax.x0, ax.x1) == (0.0, 1.0)
    r = plot.MARKER_RADIUS
    for i, p in enumerate(rep["points"], start=1):
        c, row = plot.to_pixel(ax, p["blocks_computed_fraction_reuse_steps"], p["psnr_vs_fp32_db"])
        assert plot.LEFT < c < plot.RIGHT and plot.TOP < row < plot.BOTTOM
        assert img[row, c + r] == img[row, c - r] == img[row - r, c] == plot.BLACK
        # Filled: dark at the centre; hollow: a ring with white inside.
        assert img[row, c] == (plot.BLACK if p["meets_target"] else plot.WHITE), i
        # The label (its row number) is drawn just above right of the marker.
        label = img[row - r - 10: row - r, c + r + 2: c + r + 2 + plot.text_width(str(i))]
        assert (label == plot.BLACK).any()
    # Higher PSNR is higher up, more work further right.
    (c1, r1), (c2, r2) = (plot.to_pixel(ax, x, y) for x, y in ((0.3, 19.8), (0.8, 17.0)))
    assert c1 < c2 and r1 < r2


def test_filled_and_hollow_markers_differ():
    def marker(meets):
        rep = report([{"theta": 0.5, "psnr_vs_fp32_db": 19.0,
                       "blocks_computed_fraction_reuse_steps": 0.25, "meets_target": meets}])
        img = plot.sweep_image(rep)
        c, row = plot.to_pixel(plot.sweep_axes(rep), 0.25, 19.0)
        r = plot.MARKER_RADIUS
        return img[row - r: row + r + 1, c - r: c + r + 1]
    filled, hollow = marker(True), marker(False)
    assert (filled == plot.BLACK).sum() > (hollow == plot.BLACK).sum() > 0
    assert (hollow == plot.WHITE).any() and not (filled[2:-2, 2:-2] != plot.BLACK).any()


def test_the_reference_lines_are_at_w8a8_its_target_floor_and_the_target_work():
    rep = report()
    img = plot.sweep_image(rep)
    ax = plot.sweep_axes(rep)
    c = plot.LEFT + 20                              # left of every point and label
    for level in (20.0, 19.5):
        _, row = plot.to_pixel(ax, 0.0, level)
        line = img[row, plot.LEFT + 1: plot.RIGHT]
        assert (line == plot.DARK).mean() > 0.3, level
        assert img[row, c: c + 8].min() <= plot.DARK
    col, _ = plot.to_pixel(ax, 0.5, ax.y0)
    assert (img[plot.TOP: plot.BOTTOM, col] == plot.DARK).mean() > 0.3
    # Without a W8A8 level (an old report), no horizontal lines: only the points and frame.
    rep["w8a8"] = {"psnr_vs_fp32_db": None}
    _, row = plot.to_pixel(plot.sweep_axes(rep), 0.0, 20.0)
    assert plot.sweep_image(rep)[row, c: c + 8].min() > plot.DARK


def test_points_without_a_finite_psnr_or_a_reuse_fraction_sit_on_the_edges():
    rep = report([
        {"attention": "float", "psnr_vs_fp32_db": 19.0,
         "blocks_computed_fraction_reuse_steps": None, "meets_target": False},
        {"attention": "dstar", "psnr_vs_fp32_db": None,            # identical to FP32
         "blocks_computed_fraction_reuse_steps": 0.4, "meets_target": False}])
    img = plot.sweep_image(rep)
    ax = plot.sweep_axes(rep)
    (c1, r1), (c2, r2) = plot.to_pixel(ax, 1.0, 19.0), plot.to_pixel(ax, 0.4, None)
    assert c1 == plot.RIGHT and r2 == plot.TOP
    r = plot.MARKER_RADIUS
    assert img[r1, c1 - r] == img[r2 + r, c2] == plot.BLACK
    assert plot.to_pixel(ax, 0.4, float("inf")) == (c2, r2)


def test_the_table_numbers_its_rows_as_the_plot_labels_them():
    lines = format_sweep(report()).splitlines()
    assert lines[2].split()[0] == "#"
    assert [ln.split()[:2] for ln in lines[3:]] == [["1", "0.5"], ["2", "0.8"], ["3", "1.0"]]


def test_plot_without_sweep_is_a_one_line_error(capsys, tmp_path):
    code, out, err = run(capsys, "analyze", "--quiet", "--png", "", "--plot",
                         str(tmp_path / "p.png"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "--plot" in err and "--sweep" in err
    assert not (tmp_path / "p.png").exists()


def test_plot_path_is_checked_before_the_sweep(capsys, tmp_path, monkeypatch):
    def no_run(*a, **k):
        raise AssertionError("the sweep ran")
    monkeypatch.setattr(analyze, "run_sweep", no_run)
    code, out, err = run(capsys, "analyze", "--quiet", "--sweep", "theta=0.5", "--plot",
                         str(tmp_path / "no" / "p.png"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "--plot" in err


def test_plot_is_drawn_from_the_printed_json(capsys, tmp_path, monkeypatch):
    rep = report()
    monkeypatch.setattr(analyze, "run_sweep", lambda *a, **k: json.loads(json.dumps(rep)))
    png = tmp_path / "sweep.png"
    code, out, _ = run(capsys, "analyze", "--quiet", "--json", "--sweep", "theta=0.5,0.8,1",
                       "--plot", str(png))
    assert code == 0
    printed = json.loads(out)
    assert printed["plot"] == str(png)
    assert png.read_bytes() == plot.sweep_png(printed) == plot.sweep_png(rep)
    assert not list(tmp_path.glob(".*tmp")), "a temporary file was left behind"
    code, out, _ = run(capsys, "analyze", "--quiet", "--sweep", "theta=0.5,0.8,1",
                       "--plot", str(png))
    assert code == 0 and f"plot (points by row number): {png}" in out


def test_a_real_tiny_sweep_writes_its_plot(capsys, tmp_path):
    png, js = tmp_path / "sweep.png", tmp_path / "sweep.json"
    code, out, _ = run(capsys, "analyze", "--preset", "tiny", "--steps", "2", "--samples", "1",
                       "--quiet", "--sweep", "theta=0.3", "--plot", str(png),
                       "--output", str(js))
    assert code == 0 and f"plot (points by row number): {png}" in out
    rep = json.loads(js.read_text())
    assert [p["theta"] for p in rep["points"]] == [0.3] and rep["plot"] == str(png)
    img = decode(png.read_bytes())
    assert png.read_bytes() == plot.sweep_png(rep)          # re-rendered from the stored JSON
    ax = plot.sweep_axes(rep)
    for p in rep["points"]:
        c, row = plot.to_pixel(ax, p["blocks_computed_fraction_reuse_steps"],
                               p["psnr_vs_fp32_db"])
        assert img[row, c + plot.MARKER_RADIUS] == plot.BLACK
