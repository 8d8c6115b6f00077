"""A node's whole learned peak: what its first use's window misses (a later use, the work between uses) is
measured once, reserved by the next run at the node's uses, and counted by the plan, which stops a node at
its first use (a Qwen-Image-Edit prompt encodes its pictures with the VAE after the text encoder)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from app.plan_command import load_for_plan
from memory import ComponentSpec, MemoryConfig, MemoryManager, Working
from memory.learned import node_shape_key
from nodes.plan import make_plan

REPO = Path(__file__).resolve().parent.parent
MiB = 2**20
LATER = 64 * MiB  # what the node's second use holds at once: 8 x (8192 x 256) float32


def _spec(tmp_path: Path, name: str) -> ComponentSpec:
    torch.manual_seed(0)
    net = torch.nn.Linear(256, 256)
    save_file(net.state_dict(), tmp_path / f"{name}.safetensors")

    def build() -> torch.nn.Module:
        fresh = torch.nn.Linear(256, 256)
        fresh.load_state_dict(net.state_dict())
        return fresh

    return ComponentSpec(f"{name}#net", name, "other", build, (tmp_path / f"{name}.safetensors",))


def _two_use_node(mm: MemoryManager, first: ComponentSpec, second: ComponentSpec) -> int:
    """A node that uses `first` lightly, then holds LATER bytes beside `second`; returns what the ledger
    reserved beside `first`."""
    a, b = mm.register(first), mm.register(second)
    with mm.node_scope("n1", "Edit"):
        with mm.use(a, working=Working(formula_bytes=123, shape_key="1x8")) as module:
            reserved = mm.ledger.working[f"use:{a.key}"]
            module(torch.randn(1, 256))
        with mm.use(b, working=Working(formula_bytes=456, shape_key="8x8192")) as module:
            held = [module(torch.randn(8192, 256)) for _ in range(8)]  # alive until the use ends
        del held
    return reserved


@pytest.mark.slow  # builds two small models and holds 64 MiB (~1 s)
def test_a_nodes_later_use_is_learned_under_its_first_use_and_reserved_there_next_run(tmp_path: Path) -> None:
    first, second = _spec(tmp_path, "te"), _spec(tmp_path, "vae")
    config = MemoryConfig(device="cpu", policy="none", data_dir=tmp_path)
    with MemoryManager(config) as mm:
        assert _two_use_node(mm, first, second) == 123  # nothing learned yet: the formula
        whole = mm.learned.get("cpu", "Edit", first.learned_key, node_shape_key("1x8"))
        own = mm.learned.get("cpu", "Edit", first.learned_key, "1x8")
    # The node's figure has the second use's activations, which the first use's own window never saw.
    assert whole is not None and whole >= LATER and own is not None and own < LATER
    with MemoryManager(config) as mm:  # a new process reads the same file
        assert _two_use_node(mm, first, second) == whole


def test_a_node_whose_peak_is_inside_its_first_use_learns_no_whole_figure(tmp_path: Path) -> None:
    first = _spec(tmp_path, "te")
    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp_path)) as mm:
        handle = mm.register(first)
        with mm.node_scope("n1", "Run"), mm.use(handle, working=Working(7, "8x8192")) as module:
            held = [module(torch.randn(8192, 256)) for _ in range(8)]
            del held
        assert mm.learned.get("cpu", "Run", first.learned_key, node_shape_key("8x8192")) is None
        assert mm.learned.get("cpu", "Run", first.learned_key, "8x8192") is not None


@pytest.mark.slow  # builds the tiny Qwen-Image-Edit demo folder and plans its workflow (~3 s)
def test_the_plan_counts_a_nodes_whole_learned_peak_beside_the_models_after_its_first_use(
    registry, tmp_path: Path
) -> None:
    wf = load_for_plan(REPO / "resources/workflows/edit_qwenimage.json", [], [], registry)
    config = MemoryConfig(device="cpu", policy="none", ram_budget="4GiB", data_dir=tmp_path)
    with MemoryManager(config) as mm:
        before = make_plan(wf, registry, mm)
        node = next(n for n in before.nodes if n.node_id == "negative")
        te, vae = [w for w in node.working if w["model"]]
        assert (te["component"], vae["component"]) == ("text_encoder", "vae")
        assert vae["source"] == "none" and vae["bytes"] == 0  # the plan stopped at the text encoder
        handle = next(h for h in mm.ledger.handles.values() if h.spec.name == "text_encoder")
        # What a run records for the node (MemoryManager.node_scope), under its first use's key.
        whole = te["bytes"] + 40 * MiB
        key = node_shape_key(te["shape"])
        mm.learned.record(mm.device_kind, node.node_type, handle.spec.learned_key, key, whole)
    with MemoryManager(config) as mm:
        after = make_plan(wf, registry, mm)
    node_after = next(n for n in after.nodes if n.node_id == "negative")
    te2, vae2 = [w for w in node_after.working if w["model"]]
    assert te2["source"] == vae2["source"] == "learned" and te2["bytes"] == vae2["bytes"] == whole
    assert te2["formula"] == te["bytes"]  # the formula it replaced, kept beside it
    assert node_after.device_peak >= node.device_peak + 40 * MiB
