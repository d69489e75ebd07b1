import pytest

from dstar.config import (
    PRESETS,
    Config,
    ConfigError,
    Datapath,
    Packing,
    WeightStore,
    bits_signed,
    load_config,
    preset,
)


def test_presets_are_valid_and_named():
    assert {"tiny", "default"} <= set(PRESETS)
    for cfg in PRESETS.values():
        assert isinstance(cfg, Config)
        assert cfg.k_tile % cfg.group == 0


@pytest.mark.parametrize("field,value,words", [
    ("group", 1, "group"), ("group", 65, "group"), ("e_max", 16, "e_max"), ("tau", -1, "tau"),
    ("state_bits", 8, "state_bits"), ("theta", 0.0, "theta"), ("theta", 1.5, "theta"),
    ("packing", "zigzag", "packing"), ("weight_store", "flops", "weight_store"),
    ("datapath", "w8a8", "datapath"), ("packing", 1, "packing must be one of lockstep, compact"),
    ("k_tile", 24, "k_tile=24"), ("steps", 0, "steps"),
    ("cfg_scale", 0.5, "cfg_scale"), ("max_k", 100, "max_k=100"), ("group", "16", "group"),
    ("tau", True, "tau"), ("n_arrays", 0, "n_arrays"), ("lattice_bits", 9, "lattice_bits"),
    ("refine_max", 9, r"^refine_max must be \[0, 8\], got 9$"),
    ("refine_at", 0.0, r"^refine_at must be in \(0, 1\], got 0.0$"),
    ("softmax_lanes", -2, "^softmax_lanes must be a power of two dividing group=16, got -2$"),
    ("softmax_lanes", 3, "^softmax_lanes must be a power of two dividing group=16, got 3$"),
    ("softmax_lanes", 32, "^softmax_lanes must be a power of two dividing group=16, got 32$"),
])
def test_bad_values_are_named(field, value, words):
    with pytest.raises(ConfigError, match=words):
        preset("default").replace(**{field: value})


def test_softmax_lanes_follow_the_group():
    assert preset("default").replace(softmax_lanes=16).softmax_lanes == 16
    assert preset("default").softmax_lanes == 0                      # auto by default
    assert preset("default").softmax_keys_per_cycle == 4
    assert preset("default").replace(softmax_lanes=1).softmax_keys_per_cycle == 1
    assert preset("tiny").replace(m_tile=3, softmax_lanes=0).softmax_keys_per_cycle == 2
    with pytest.raises(ConfigError, match="dividing group=8, got 16"):
        preset("default").replace(group=8, softmax_lanes=16)


def test_unknown_field_is_named():
    with pytest.raises(ConfigError, match="bogus"):
        preset("default").replace(bogus=1)


def test_unbuildable_accumulator_is_refused():
    with pytest.raises(ConfigError, match="accumulator"):
        Config(state_bits=32, max_k=1 << 16)


def test_derived_widths():
    cfg = preset("default")
    assert cfg.state_max == 2 ** 15 - 1
    assert cfg.target_max == cfg.state_max - 2 ** (cfg.e_max - 1)
    # The accumulator must hold max_k * 127 * state_max and not one bit less.
    assert cfg.acc_bound == cfg.max_k * 127 * cfg.state_max
    assert -(1 << (cfg.acc_bits - 1)) <= -cfg.acc_bound
    assert cfg.acc_bound <= (1 << (cfg.acc_bits - 1)) - 1
    assert cfg.acc_bound > (1 << (cfg.acc_bits - 2)) - 1
    assert [bits_signed(b) for b in (0, 1, 127, 128, 255)] == [1, 2, 8, 9, 9]


@pytest.mark.parametrize("tau,e_tol", [(0, 0), (1, 1), (2, 2), (3, 2), (4, 3), (7, 3), (8, 4),
                                       (10 ** 4, 7)])
def test_e_tol(tau, e_tol):
    assert preset("default").replace(tau=tau).e_tol == e_tol


def test_toml_loading(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('preset = "tiny"\ntau = 2\npacking = "lockstep"\n')
    cfg = load_config(f)
    assert cfg.tau == 2 and cfg.packing == "lockstep" and cfg.k_tile == preset("tiny").k_tile
    assert load_config(f, tau=3).tau == 3          # overrides win over the file
    f.write_text("tua = 2\n")
    with pytest.raises(ConfigError, match="unknown config key.*tua"):
        load_config(f)
    f.write_text("tau = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(f)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="unknown preset 'huge'"):
        load_config(preset_name="huge")
    f.write_text('preset = "tiny"\n')
    with pytest.raises(ConfigError, match="conflicts"):
        load_config(f, "default")


def test_float_fields_accept_ints():
    assert preset("default").replace(theta=1).theta == 1.0


def test_lattice_bits_must_fit_the_state():
    with pytest.raises(ConfigError, match="lattice_bits=5 puts a key step's values"):
        preset("default").replace(state_bits=12, lattice_bits=5)
    assert preset("default").replace(lattice_bits=7).lattice_bits == 7


def test_choices_are_enums_given_as_strings(tmp_path):
    cfg = preset("tiny").replace(packing="lockstep", datapath="dense", weight_store="lane_ram")
    assert cfg.packing is Packing.LOCKSTEP and cfg.datapath is Datapath.DENSE
    assert cfg.weight_store is WeightStore.LANE_RAM
    assert cfg == preset("tiny").replace(packing=Packing.LOCKSTEP, datapath=Datapath.DENSE,
                                         weight_store=WeightStore.LANE_RAM)
    d = cfg.to_dict()                       # the TOML form: plain strings
    assert type(d["packing"]) is str and d["packing"] == "lockstep"
    assert Config(**d) == cfg
    f = tmp_path / "c.toml"
    f.write_text('datapath = "dense"\n')
    assert load_config(f).datapath is Datapath.DENSE


def test_dense_is_a_datapath_not_a_packing(tmp_path):
    with pytest.raises(ConfigError, match='^packing = "dense" is not a packing.*'
                                          'use datapath = "dense"$'):
        preset("tiny").replace(packing="dense")
    f = tmp_path / "c.toml"
    f.write_text('packing = "dense"\n')
    with pytest.raises(ConfigError, match='use datapath = "dense"'):
        load_config(f)


def test_hardware_fields_exclude_the_run():
    cfg = preset("default")
    hw, run = cfg.hardware(), cfg.run_params()
    assert set(run) == {"refresh_linear", "lattice_bits", "refine_max", "refine_at", "theta",
                        "refresh_attn", "sar_reuse_from", "steps", "fmdq_lattice", "attention",
                        "masks", "samples", "cfg_scale", "seed", "workload"}
    assert {"group", "k_tile", "packing", "datapath", "weight_store", "head_dim"} <= set(hw)
    # FMDQ's hardware fields join hardware() only with encoding = "fmdq" (test_fmdq.py).
    assert not set(hw) & set(run) and {**hw, **run, **cfg.unused()} == cfg.to_dict()
    assert cfg.replace(theta=0.9, steps=3, seed=5, workload="photos").hardware() == hw
    assert cfg.replace(packing="lockstep").hardware() != hw
    # attention is v1's (a run field, v1's hash unchanged) until it selects SAR's hardware.
    sar = cfg.replace(attention="sar")
    assert sar.hardware() == {**hw, "attention": "sar"} and "attention" not in sar.run_params()
    assert {**sar.hardware(), **sar.run_params(), **sar.unused()} == sar.to_dict()


@pytest.mark.parametrize("field", ["cfg_scale", "theta"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_float_fields_must_be_finite(field, value):
    with pytest.raises(ConfigError, match=f"^{field} must be a finite number, got "):
        preset("tiny").replace(**{field: value})


def test_cfg_scale_nan_in_toml_is_refused(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("cfg_scale = nan\n")
    with pytest.raises(ConfigError, match="cfg_scale must be a finite number, got nan"):
        load_config(f)


@pytest.mark.parametrize("content,words", [
    (b"\xfb\x00\xff binary", "is not UTF-8 text (byte 0xfb at offset 0)"),
    ("group = 16".encode("utf-16"), "is not UTF-8 text (byte 0xff at offset 0)"),
    (b'preset = ["tiny"]\n', "preset in '{f}' must be a string naming one of default, tiny, "
                             "large, got ['tiny']"),
    (b"[preset]\na = 1\n", "preset in '{f}' must be a string naming one of default, tiny, "
                           "large, got {{'a': 1}}"),
])
def test_unreadable_config_files_are_named(tmp_path, content, words):
    f = tmp_path / "c.toml"
    f.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert words.format(f=f) in str(e.value)


def test_a_folder_as_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=f"config file '{tmp_path}' is a folder, not a file"):
        load_config(tmp_path)


def test_an_empty_preset_name_is_refused():
    with pytest.raises(ConfigError, match="unknown preset ''; choose one of default, tiny"):
        load_config(None, "")


def test_numpy_scalars_count_as_the_numbers_they_are():
    import numpy as np
    c = Config(k_tile=np.int64(32), theta=np.float32(0.5), cfg_scale=np.int32(2))
    assert (c.k_tile, c.theta, c.cfg_scale) == (32, 0.5, 2.0)
    assert type(c.k_tile) is int and type(c.theta) is float and type(c.cfg_scale) is float
    for bad in (np.bool_(True), np.float64(32.0)):
        with pytest.raises(ConfigError, match="k_tile must be int"):
            Config(k_tile=bad)
