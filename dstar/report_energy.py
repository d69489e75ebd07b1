"""The constants of ``dstar report``'s energy and area model, each with its source.

Sources are ``shared/research/eval-anchors.md`` (section 4) and ``peers.md`` (section 4) with
their evidence tags ([V] primary, [V2] secondary, [I] the research notes' arithmetic), the
project's own synthesis (``docs/results/efficiency_tiny.json``: sky130 HD cells, the CMOS estimate
beside), or
**ours**: an estimate of this model, said as such. Energies are pJ at 45 nm unless named
otherwise; ``NODE_ENERGY`` scales logic and SRAM to another node (DRAM is not scaled).
"""

from dataclasses import dataclass

__all__ = ["Constant", "ENERGY", "NODE_ENERGY", "AREA_PER_MAC", "AREA_PER_MAC_CMOS",
           "EFFICIENCY_JSON", "A100", "area_per_mac", "value", "table"]


@dataclass(frozen=True)
class Constant:
    value: float
    unit: str
    source: str


_H = "Horowitz ISSCC'14, 45 nm [V2] (peers.md 4.1)"
_BP = "bit-product rule 3.1 fJ/bit^2 from Horowitz's INT8 multiplier [I] (eval-anchors 4.1)"

#: Energy per operation (pJ, 45 nm) and per bit moved.
ENERGY: dict[str, Constant] = {
    "mul_8x8": Constant(0.2, "pJ", f"8b int mult, {_H}"),
    "add_8": Constant(0.03, "pJ", f"8b int add, {_H}"),
    "add_16": Constant(0.05, "pJ", f"16b int add, {_H}"),
    "add_32": Constant(0.1, "pJ", f"32b int add, {_H}"),
    "fp16_mul": Constant(1.1, "pJ", f"16b FP mult, {_H}"),
    "fp16_add": Constant(0.4, "pJ", f"16b FP add, {_H}"),
    "mul_4x8": Constant(0.1, "pJ", f"4b x 8b mult, {_BP}"),
    "mul_2x8": Constant(0.05, "pJ", f"2b x 8b mult, {_BP}"),
    "mac_int8": Constant(0.3, "pJ", "INT8 MAC with INT32 accumulate: mul_8x8 + add_32 [I] "
                         "(eval-anchors 4.1)"),
    "nibble_pass": Constant(0.15, "pJ", "one 4b x 8b lane op with its share of the column sum: "
                            "mul_4x8 + add_16 (ours; two passes = one INT8 MAC)"),
    "simd4_cycle": Constant(0.45, "pJ", "one SIMD-4 2b x 8b PE cycle: 4 x mul_2x8 + 3 x add_16 "
                            "(four-term sum) + add_32 (Horner accumulate) (ours, from Horowitz "
                            "and the bit-product rule)"),
    "qpu_element": Constant(0.1, "pJ", "encoding one activation (difference, range, class or "
                            "width): add_16 + a compare (add_16) (ours)"),
    "vpu_op": Constant(1.5, "pJ", f"one FP16 multiply-add, fp16_mul + fp16_add, {_H}"),
    "sram_bit": Constant(0.31, "pJ/bit", "32 KB bank, 64-bit read 20 pJ, Horowitz [V2] "
                         "(eval-anchors 4.2)"),
    "hbm_bit": Constant(4.0, "pJ/bit", "HBM2, eval-anchors 4.3's recommendation (O'Connor "
                        "MICRO'17 3.9 [U], DRAMsim3 core 1.6-2.1 [V]; Micron HBM2E 6.0 [V]); "
                        "not node-scaled"),
}

#: VPU operations per element (ours): softmax (exp by a polynomial, sum, scale), GELU (tanh
#: form), normalization (mean and variance, scale).
VPU_OPS = {"softmax": 3, "gelu": 4, "norm": 3}

#: Logic and SRAM energy at a node relative to 45 nm, equal V_dd (Stillmaker-Baas table in
#: hwcomponents [V code], arithmetic [I]: eval-anchors 4.4).
NODE_ENERGY: dict[int, Constant] = {
    45: Constant(1.0, "x", "the constants' node"),
    28: Constant(0.513, "x", "45 -> 28 nm, Stillmaker-Baas, eval-anchors 4.4"),
    14: Constant(0.139, "x", "45 -> 14 nm, Stillmaker-Baas, eval-anchors 4.4"),
    7: Constant(0.094, "x", "45 -> 7 nm, Stillmaker-Baas at equal V_dd (0.047-0.057 at nominal "
                "V_dd: ours is the conservative end), eval-anchors 4.4"),
}

#: Where the measured areas come from: ``dstar results --run efficiency_tiny``'s PE arrays
#: (each array with its Y memory; ``tests/cli/test_report.py`` checks these ratios against it).
EFFICIENCY_JSON = "docs/results/efficiency_tiny.json"
_SKY = f"{EFFICIENCY_JSON} (sky130 HD cells, PE-array level: logic, weights and Y memories)"
_CMOS = f"{EFFICIENCY_JSON} (the CMOS transistor estimate at 45 nm, PE-array level)"
#: PE-array area per 8-bit MAC of peak throughput, relative to the lean INT8 array, on sky130
#: HD standard cells (equal-area comparisons scale each design's PE count by the inverse).
AREA_PER_MAC: dict[str, Constant] = {
    "int8_sa": Constant(1.0, "x", f"the lean INT8 array, 407,940 um^2 for its 64 MACs, {_SKY}"),
    "nibble": Constant(3.589, "x", f"v1 compact nibble-lane arrays 1,464,167 um^2, {_SKY}"),
    "fmdq": Constant(1.420, "x", f"FMDQ SIMD-4 arrays T 8, M 8 (PE logic, weight window, Y) "
                     f"579,092 um^2, {_SKY}"),
    "ditto_like": Constant(1.291, "x", "the ceiling of any nibble-lane array (lone multipliers, "
                           f"weights, column tree, no selection or control) 118,472 vs 91,743 "
                           f"um^2, {_CMOS}, not synthesized on sky130: a lower bound, in Ditto's "
                           "favour"),
    "cambricon_d_like": Constant(1.291, "x", "ours: as the nibble-lane ceiling (INT3 x 8b "
                                 "inlier lanes plus outlier lanes), in its favour"),
    "exion_like": Constant(1.1, "x", "ours: an INT8 array plus the eager-prediction unit and "
                           "ConMerge (estimate)"),
}
#: The same on the CMOS transistor estimate, for continuity with earlier reports (the designs
#: that have no measured area keep their sky130 row's value).
AREA_PER_MAC_CMOS: dict[str, Constant] = {
    "nibble": Constant(3.454, "x", f"316,849 vs 91,743 um^2, {_CMOS}"),
    "fmdq": Constant(1.363, "x", f"125,050 vs 91,743 um^2, {_CMOS}"),
}


def area_per_mac(design: str, flow: str = "sky130") -> float:
    """``AREA_PER_MAC``'s value, or with ``flow = "cmos"`` the transistor estimate's."""
    if flow == "cmos":
        return AREA_PER_MAC_CMOS.get(design, AREA_PER_MAC[design]).value
    return AREA_PER_MAC[design].value


#: The A100 (peers.md 3.2 [V], the datasheet) and its measured step times (eval-anchors 3.1).
A100 = {
    "fp16_tflops": Constant(312.0, "TFLOPS", "A100 FP16 tensor dense, datasheet [V] (peers 3.2)"),
    "hbm_tbs": Constant(1.555, "TB/s", "A100-40GB HBM2, datasheet [V] (peers 3.2)"),
    "power_pcie_w": Constant(250.0, "W", "A100-PCIe-40GB TDP [V]; DSTAR's number (eval-anchors)"),
    "power_sxm_w": Constant(400.0, "W", "A100-SXM4 TDP [V] (peers 3.2)"),
    "step_pixart-alpha-1024": Constant(0.118, "s", "PixArt-alpha 1024^2, A100-PCIe-40GB, "
                                       "Diffusers, 8.469 it/s [V] onediff pixart_alpha README"),
    "step_latte-512": Constant(0.625, "s", "Latte-1 512^2 x 16, A100-PCIe-40GB, 1.60 it/s [V] "
                               "onediff latte README"),
}


def value(name: str) -> float:
    return ENERGY[name].value


def table() -> list[dict]:
    """Every constant as ``{"name", "value", "unit", "source"}`` rows (the report's table)."""
    rows = []
    for group, d in (("energy", ENERGY), ("node", NODE_ENERGY), ("area", AREA_PER_MAC),
                     ("area_cmos", AREA_PER_MAC_CMOS), ("a100", A100)):
        for k, c in d.items():
            rows.append({"group": group, "name": str(k), "value": c.value, "unit": c.unit,
                         "source": c.source})
    rows.append({"group": "energy", "name": "vpu_ops_per_element", "value": None, "unit": "ops",
                 "source": f"ours: {VPU_OPS}"})
    return rows
