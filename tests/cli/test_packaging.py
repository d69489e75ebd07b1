"""The distribution: a wheel built from the checkout installs one import package, ``dstar``, with
its data files, and works outside the checkout (build output under the working directory)."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

DATA = ("dstar/golden/data/dit_mnist.npz", "dstar/golden/data/dit_photos.npz",
        "dstar/synth/baselines/tiny.json")


@pytest.fixture(scope="module")
def wheel(build_dir):
    out = build_dir / "wheel"
    for old in out.glob("*.whl"):
        old.unlink()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "--disable-pip-version-check", "-w", str(out), root],
                   check=True, capture_output=True)
    (whl,) = out.glob("dstar-*.whl")
    return whl


def test_wheel_has_one_top_level_package_and_its_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"dstar", next(t for t in tops if t.endswith(".dist-info"))}, tops
    for sub in ("golden", "hw", "sim", "synth"):
        assert f"dstar/{sub}/__init__.py" in names
    for f in DATA:
        assert f in names, f"{f} is not in the wheel"


def test_installed_wheel_runs_outside_the_checkout(wheel, build_dir):
    target = build_dir / "wheel" / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--disable-pip-version-check", "--upgrade", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    cwd = build_dir / "wheel" / "cwd"
    cwd.mkdir(exist_ok=True)
    code = ("import json, dstar.hw.generate, dstar.sim.cycle_model, dstar.synth.baseline as b; "
            "from dstar.golden.dit import bundled_weights_path as w; from dstar.paths import "
            "build_root; print(json.dumps([str(w()), str(b.BASELINES), str(build_root()), "
            "dstar.hw.generate.__file__]))")
    env = {k: v for k, v in os.environ.items() if k != "DSTAR_BUILD_DIR"}
    env["PYTHONPATH"] = str(target)
    res = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, check=True,
                         capture_output=True, text=True)
    weights, baselines, build, module = json.loads(res.stdout)
    for p in (weights, baselines, module):
        assert p.startswith(str(target)), p
    assert os.path.isfile(weights) and os.path.isfile(os.path.join(baselines, "tiny.json"))
    assert build == str(cwd / "build")


def test_build_root_follows_the_environment_and_the_working_directory(tmp_path, monkeypatch):
    from dstar.paths import BUILD_DIR_ENV, build_dir, build_root
    monkeypatch.delenv(BUILD_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert build_root() == tmp_path / "build"
    monkeypatch.setenv(BUILD_DIR_ENV, str(tmp_path / "elsewhere"))
    assert build_dir("synth", "x") == tmp_path / "elsewhere" / "synth" / "x"
