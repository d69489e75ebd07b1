"""Every per-layer registry of a closed choice covers each member of its enum, and nothing else:
adding a packing strategy, a datapath, a weight store, a synthesis target, a workload, an
encoding, a sampling run of the main job, a sweep's linears, an HDL simulator, an efficiency
strategy or a design of ``dstar report`` means one enum member and one entry per registry, and
this test names the registry that lacks it (the training registry, which needs PyTorch, is
checked in ``tests/torch``)."""

import pytest

from dstar.analyze import LINEAR_HOOKS, LinearsMode
from dstar.config import Datapath, Encoding, FmdqLattice, FmdqRule, Packing, WeightStore, Workload
from dstar.golden.difflinear import ENCODINGS, LATTICES
from dstar.golden.dispatch import STRATEGIES
from dstar.golden.fmdq import RULES
from dstar.golden.runs import ENCODING_PATHS, PATH_HOOKS, RunPath
from dstar.golden.workloads import WORKLOADS
from dstar.hw.dispatcher import DISPATCHERS
from dstar.hw.generate import ENCODED_TOPS, TOPS
from dstar.hw.pe_array import WEIGHT_STORES
from dstar.report_designs import DESIGNS, DesignName
from dstar.report_energy import AREA_PER_MAC
from dstar.results import WORKLOAD_ENTRIES
from dstar.sim.cycle_model import EVENT_MODELS
from dstar.sim.cycle_reference import LANE_QUEUES
from dstar.sim.layer_cycles import LAYER_CYCLES
from dstar.sim.simulators import SIMULATORS, Simulator
from dstar.synth.efficiency import STRATEGIES as EFFICIENCY
from dstar.synth.efficiency import Strategy
from dstar.synth.flows import TARGETS, SynthTarget

REGISTRIES = [
    ("dstar.golden.dispatch.STRATEGIES", STRATEGIES, Packing),
    ("dstar.hw.dispatcher.DISPATCHERS", DISPATCHERS, Packing),
    ("dstar.sim.cycle_model.EVENT_MODELS", EVENT_MODELS, Packing),
    ("dstar.sim.cycle_reference.LANE_QUEUES", LANE_QUEUES, Packing),
    ("dstar.hw.generate.TOPS", TOPS, Datapath),
    ("dstar.sim.layer_cycles.LAYER_CYCLES", LAYER_CYCLES, Datapath),
    ("dstar.hw.pe_array.WEIGHT_STORES", WEIGHT_STORES, WeightStore),
    ("dstar.synth.flows.TARGETS", TARGETS, SynthTarget),
    ("dstar.golden.workloads.WORKLOADS", WORKLOADS, Workload),
    ("dstar.golden.difflinear.ENCODINGS", ENCODINGS, Encoding),
    ("dstar.golden.fmdq.RULES", RULES, FmdqRule),
    ("dstar.golden.difflinear.LATTICES", LATTICES, FmdqLattice),
    ("dstar.hw.generate.ENCODED_TOPS", ENCODED_TOPS, Encoding),
    ("dstar.golden.runs.PATH_HOOKS", PATH_HOOKS, RunPath),
    ("dstar.analyze.LINEAR_HOOKS", LINEAR_HOOKS, LinearsMode),
    ("dstar.sim.simulators.SIMULATORS", SIMULATORS, Simulator),
    ("dstar.synth.efficiency.STRATEGIES", EFFICIENCY, Strategy),
    ("dstar.results.WORKLOAD_ENTRIES", WORKLOAD_ENTRIES, Workload),
    ("dstar.report_designs.DESIGNS", DESIGNS, DesignName),
]


@pytest.mark.parametrize("name,registry,enum", REGISTRIES, ids=[r[0] for r in REGISTRIES])
def test_registry_covers_its_enum(name, registry, enum):
    assert set(registry) == set(enum), name
    assert all(isinstance(key, enum) for key in registry), f"{name}: keys must be {enum.__name__}"


def test_every_encoding_has_its_linears_run():
    """``analyze`` shows the encodings side by side: each has a ``<encoding>-linear`` run."""
    assert [p.value for p in ENCODING_PATHS] == [f"{e.value}-linear" for e in Encoding]
    assert all(isinstance(p, RunPath) for p in ENCODING_PATHS)


def test_every_report_design_has_its_area():
    """``report_energy.AREA_PER_MAC`` (keyed by name: ``report_designs`` imports that module) has
    an area for every design ``dstar report`` compares, and no other."""
    assert set(AREA_PER_MAC) == {d.value for d in DesignName}
