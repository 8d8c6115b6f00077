"""The embedded LLM workflows: they validate, and LLM -> image runs with the LLM unloaded first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory import MemoryConfig, MemoryManager
from nodes.events import NodeText
from nodes.executor import Executor
from nodes.workflow import load_workflow, validate
from pipelines.paths import resolve_model_path

# Integration and parity: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

WORKFLOWS = Path(__file__).resolve().parent.parent / "resources" / "workflows"


@pytest.mark.parametrize("name", ["llm.json", "llm_to_image.json"])
def test_llm_workflows_validate(registry, name: str) -> None:
    wf = load_workflow(WORKFLOWS / name, registry)
    assert validate(wf, registry) == []
    data = json.loads((WORKFLOWS / name).read_text())
    assert set(data["ui"]["nodes"]) == set(data["nodes"])  # every node has a position in the editor


def test_llm_to_image_wires_the_llm_text_into_the_prompt(registry, cpu_memory) -> None:
    wf = load_workflow(WORKFLOWS / "llm_to_image.json", registry)
    positive = wf.nodes["positive"]
    assert positive.type == "TextEncode"
    assert (positive.inputs["text"].node, positive.inputs["text"].output) == ("request", "text")
    assert wf.nodes["request"].type == "LLMGenerate" and wf.nodes["llm"].type == "LoadLLM"
    # The LLM runs before anything of the diffusion model is needed.
    order = Executor(registry, cpu_memory).plan(wf)
    assert order.index("request") < order.index("positive") < order.index("sampler")


def test_llm_to_image_runs_with_sequential_offload(registry, tmp_path: Path) -> None:
    try:
        shapes = resolve_model_path("builtin:shapes-sd")
        resolve_model_path("builtin:smollm2")
    except FileNotFoundError as exc:
        pytest.skip(f"model not available: {exc}")
    if shapes.is_dir() and not (shapes / "model_index.json").is_file():
        pytest.skip(f"{shapes} is not a complete diffusers folder yet")
    memory = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    events: list = []
    wf = load_workflow(WORKFLOWS / "llm_to_image.json", registry)
    result = Executor(registry, memory=memory).run(wf, out_dir=tmp_path, on_event=events.append)
    assert result.ok, result.error
    prompt = Path(result.nodes["save_prompt"].files[0]).read_text()
    streamed = "".join(e.delta for e in events if isinstance(e, NodeText) and e.node_id == "request")
    assert prompt and prompt == streamed.strip() and "\n" not in prompt
    assert result.nodes["save_image"].files and Path(result.nodes["save_image"].files[0]).suffix == ".png"
    report = memory.report()
    llm_unloaded = next(e["t"] for e in report["unloads"] if e["component"] == "llm")
    diffusion_loads = [e["t"] for e in report["loads"] if e["component"] != "llm"]
    assert diffusion_loads and llm_unloaded <= min(diffusion_loads)
