"""Slow steps say what they do and how far they are (issue 16 item 8): weights read from disk report bytes,
to the node that reads them, with the ledger's total; a first GGUF conversion reports its stages; a progress
call is a cancellation point; untimed progress is throttled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType

from memory import MemoryConfig, MemoryManager
from nodes.context import UNTIMED_EVERY_S, Cancelled, CancelToken, NodeContext
from nodes.events import PROGRESS_KINDS, NodeProgress, describe_progress
from nodes.executor import Executor
from nodes.registry import default_registry
from nodes.workflow import workflow_from_dict
from tests.llm_fixtures import tiny_llama, write_tiny_gguf

REPO = Path(__file__).resolve().parent.parent


def txt2img(registry, seed: int = 42):
    data = json.loads((REPO / "resources/workflows/txt2img.json").read_text())
    data["nodes"]["load"]["params"]["path"] = "demo:tiny-sd"
    data["nodes"]["sampler"]["params"]["steps"] = 2
    data["nodes"]["sampler"]["params"]["seed"] = seed
    return workflow_from_dict(data, registry)


def loads(events: list[object]) -> list[NodeProgress]:
    return [e for e in events if isinstance(e, NodeProgress) and e.kind == "load_bytes"]


def test_weights_report_bytes_to_the_node_that_reads_them_with_the_ledgers_total(tmp_path) -> None:
    registry = default_registry(entry_point_packs=False)
    events: list[object] = []
    with MemoryManager(MemoryConfig(device="cpu", policy="sequential")) as mm:
        executor = Executor(registry, memory=mm)
        result = executor.run(txt2img(registry), out_dir=tmp_path, on_event=events.append)
        assert result.ok, result.error
        ledger = {h.spec.name: h.weight_bytes for h in mm.ledger.handles.values()}
        # The loader node reads nothing; each model reports in the node that first uses it.
        assert {(e.node_id, e.label) for e in loads(events)} == {
            ("negative", "text_encoder"),
            ("sampler", "unet"),
            ("decode", "vae"),
        }
        for name in ledger:
            mine = [e for e in loads(events) if e.label == name]
            assert mine[0].step == 0 and mine[-1].step == mine[-1].total == ledger[name]
            assert all(a.step <= b.step for a, b in zip(mine, mine[1:], strict=False))
        # A new seed: the loader is cached, the sampler loads the UNet again (sequential unloaded it) through
        # the cached loader's callback, and the bytes go to this run's sampler.
        events.clear()
        result = executor.run(txt2img(registry, seed=7), out_dir=tmp_path, on_event=events.append)
        assert result.ok and result.nodes["load"].status == "cached"
        assert {e.node_id for e in loads(events)} == {"sampler", "decode"}


def test_a_cancel_during_a_load_stops_it_and_leaves_the_model_unloaded(tmp_path) -> None:
    registry = default_registry(entry_point_packs=False)
    cancel = CancelToken()

    def on_event(event: object) -> None:
        if isinstance(event, NodeProgress) and event.kind == "load_bytes" and event.label == "unet":
            cancel.cancel()

    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        result = Executor(registry, memory=mm).run(
            txt2img(registry), out_dir=tmp_path, on_event=on_event, cancel=cancel
        )
        assert result.cancelled and result.nodes["sampler"].status == "cancelled"
        unet = next(h for h in mm.ledger.handles.values() if h.spec.name == "unet")
        assert unet.locks == 0 and unet.device_bytes == 0


def llm_workflow(registry, path: Path):
    data = json.loads((REPO / "resources/workflows/llm.json").read_text())
    data["nodes"]["llm"]["params"]["path"] = str(path)
    # The float32 conversion these tests follow (auto repacks for the int4/int8 kernels on a CPU).
    data["nodes"]["llm"]["params"]["keep_quantized"] = "off"
    for node in data["nodes"].values():
        if node["type"] == "LLMGenerate":
            node["params"]["max_new_tokens"] = 3
    return workflow_from_dict(data, registry)


def test_a_first_gguf_conversion_reports_its_stages_then_the_llm_load_reports_bytes(tmp_path) -> None:
    model = tmp_path / "tiny.gguf"
    write_tiny_gguf(tiny_llama(), model, GGMLQuantizationType.Q8_0)
    registry = default_registry(entry_point_packs=False)
    events: list[object] = []
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        result = Executor(registry, memory=mm).run(
            llm_workflow(registry, model), out_dir=tmp_path / "out", on_event=events.append
        )
        assert result.ok, result.error
        convert = [e for e in events if isinstance(e, NodeProgress) and e.kind == "convert"]
        assert convert and {e.node_id for e in convert} == {"llm"}
        stages = [e.label for e in convert]
        assert stages[0].startswith("GGUF: reading") and stages[-1] == "GGUF: writing safetensors (4/4)"
        assert any(s.startswith("GGUF: reading tokens (1/4)") for s in stages)
        assert any(s == "GGUF: dequantizing to float32 (3/4)" for s in stages)
        assert convert[-1].step == convert[-1].total
        llm = next(h for h in mm.ledger.handles.values() if h.spec.name == "llm")
        load = loads(events)
        assert load and load[-1].step == load[-1].total == llm.weight_bytes
        assert {e.node_id for e in load} == {
            e.node_id for e in events if getattr(e, "kind", "") == "decode_token"
        }
    assert describe_progress(convert[len(convert) // 2])[0].startswith("converting GGUF ")


def test_untimed_progress_is_throttled_and_each_call_can_cancel(monkeypatch, cpu_memory) -> None:
    clock = [0.0]
    monkeypatch.setattr("nodes.context.time.perf_counter", lambda: clock[0])
    emitted: list[object] = []
    cancel = CancelToken()
    ctx = NodeContext(
        node_id="n",
        node_type="T",
        memory=cpu_memory,
        out_dir=Path("."),
        workflow_json={},
        emit=emitted.append,
        cancel=cancel,
    )
    report = ctx.progress_callback("load_bytes")
    for i in range(1001):  # 1000 tensors read in 0.5 s: 5 throttle windows
        clock[0] = i * 0.0005
        report("unet", i, 1000)
    steps = [e.step for e in emitted if isinstance(e, NodeProgress)]
    assert steps[0] == 0 and steps[-1] == 1000  # the first and the last always arrive
    assert len(steps) <= 2 + 0.5 / UNTIMED_EVERY_S
    assert not cpu_memory.telemetry.events()  # bytes are not timed steps: the steps plot stays clean
    cancel.cancel()
    with pytest.raises(Cancelled):
        report("unet", 10, 1000)  # even a throttled call is a cancellation point


def test_every_progress_kind_is_worded_in_one_place() -> None:
    loading = NodeProgress("s", 858993459, 3435973837, 2e8, "load_bytes", "unet")
    assert describe_progress(loading)[0] == "loading unet 0.8/3.2 GiB"
    assert describe_progress(NodeProgress("l", 40, 100, 0.0, "convert", "GGUF: reading tokens (1/4)"))[0] == (
        "converting GGUF 40%"
    )
    assert {"sampler_step", "decode_token", "load_bytes", "convert"} <= set(PROGRESS_KINDS)


def test_split_model_files_report_bytes_with_the_ledgers_total(tmp_path) -> None:
    registry = default_registry(entry_point_packs=False)
    data = json.loads((REPO / "resources/workflows/txt2img_flux_split.json").read_text())
    data["nodes"]["sampler"]["params"].update(steps=1, preview_every=0)
    events: list[object] = []
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        result = Executor(registry, memory=mm).run(
            workflow_from_dict(data, registry), out_dir=tmp_path, on_event=events.append
        )
        assert result.ok, result.error
        ledger = {h.spec.name: h.weight_bytes for h in mm.ledger.handles.values()}
    last = {e.label: e for e in loads(events)}
    assert set(last) == set(ledger) == {"transformer", "text_encoder", "text_encoder_2", "vae"}
    assert all(last[name].step == last[name].total == ledger[name] for name in ledger)


def test_a_single_file_checkpoint_reports_every_component_with_the_ledgers_total(tmp_path) -> None:
    from diffusers import DiffusionPipeline

    from pipelines.diffusion.demo_models import ensure_demo_model
    from pipelines.diffusion.export import save_sd1_single_file

    folder = ensure_demo_model("tiny-sd")
    pipe = DiffusionPipeline.from_pretrained(str(folder))
    path = save_sd1_single_file(pipe.unet, pipe.vae, pipe.text_encoder, tmp_path / "tiny-sd.safetensors")
    registry = default_registry(entry_point_packs=False)
    wf = txt2img(registry)
    wf.nodes["load"].params.update(path=str(path), config_dir=str(folder))  # the tiny model's architecture
    events: list[object] = []
    with MemoryManager(MemoryConfig(device="cpu", policy="sequential")) as mm:
        result = Executor(registry, memory=mm).run(wf, out_dir=tmp_path / "out", on_event=events.append)
        assert result.ok, result.error
        ledger = {h.spec.name: h.weight_bytes for h in mm.ledger.handles.values()}
    last = {e.label: e for e in loads(events)}
    assert set(last) == set(ledger) == {"unet", "text_encoder", "vae"}
    assert all(last[name].step == last[name].total == ledger[name] for name in ledger)


def test_a_cancel_during_a_gguf_conversion_stops_it_and_leaves_no_cache(tmp_path) -> None:
    from pipelines.llm.gguf_cache import gguf_cache_dir, gguf_cache_root

    model = tmp_path / "tiny.gguf"
    write_tiny_gguf(tiny_llama(), model, GGMLQuantizationType.Q8_0)
    registry = default_registry(entry_point_packs=False)
    cancel = CancelToken()
    seen: list[str] = []

    def on_event(event: object) -> None:
        if isinstance(event, NodeProgress) and event.kind == "convert":
            seen.append(event.label)
            if "dequantizing" in event.label:  # the GUI's Cancel, pressed mid-conversion
                cancel.cancel()

    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        result = Executor(registry, memory=mm).run(
            llm_workflow(registry, model), out_dir=tmp_path / "out", on_event=on_event, cancel=cancel
        )
    assert result.cancelled and result.nodes["llm"].status == "cancelled"
    assert not any("writing" in label for label in seen)  # stopped at the next progress call
    assert not gguf_cache_dir(model).exists()
    assert not [p for p in gguf_cache_root().iterdir() if p.name.startswith(".")]  # no half-written folder


def test_the_headless_printer_shows_loads_and_conversions_as_bars_with_their_own_words() -> None:
    import io

    from rich.console import Console

    from app.cli import HeadlessPrinter

    out = io.StringIO()
    with HeadlessPrinter(Console(file=out, width=120), quiet=False) as printer:
        printer(NodeProgress("llm", 40, 100, 0.0, "convert", "GGUF: reading tokens (1/4)"))
        printer(NodeProgress("llm", 1, 1, 0.0, "convert", "GGUF: writing safetensors (4/4)"))
        printer(NodeProgress("sampler", int(0.8 * 2**30), int(3.2 * 2**30), 4e8, "load_bytes", "unet"))
        printer(NodeProgress("sampler", 3, 20, 2.5, "sampler_step"))
    lines = out.getvalue().splitlines()
    assert any(
        "llm converting GGUF" in ln and "100%" in ln and "writing safetensors (4/4)" in ln for ln in lines
    )
    assert any("sampler loading unet" in ln and "0.8/3.2 GiB" in ln and "381.5 MiB/s" in ln for ln in lines)
    assert any("3/20" in ln and "2.5 it/s" in ln for ln in lines)  # its own bar, not the load's


def test_an_llm_kept_quantized_reports_its_blocks_bytes(tmp_path) -> None:
    model = tmp_path / "tiny.gguf"
    write_tiny_gguf(tiny_llama(), model, GGMLQuantizationType.Q8_0)
    registry = default_registry(entry_point_packs=False)
    wf = llm_workflow(registry, model)
    wf.nodes["llm"].params["keep_quantized"] = "on"
    events: list[object] = []
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        result = Executor(registry, memory=mm).run(wf, out_dir=tmp_path / "out", on_event=events.append)
        assert result.ok, result.error
        llm = next(h for h in mm.ledger.handles.values() if h.spec.name == "llm")
        assert llm.spec.storage == "packed"  # "on" on a CPU: repacked for the int4/int8 kernels
    load = loads(events)
    assert load[0].step == 0 and load[-1].step == load[-1].total == llm.weight_bytes


def test_a_controlnet_reports_its_bytes_when_first_used(tmp_path, cpu_memory) -> None:
    import torch
    from diffusers import ControlNetModel, UNet2DConditionModel

    from pipelines.diffusion.controlnet import load_controlnet
    from pipelines.diffusion.demo_models import ensure_demo_model

    unet = UNet2DConditionModel.from_pretrained(ensure_demo_model("tiny-sd") / "unet")
    ControlNetModel.from_unet(unet, conditioning_embedding_out_channels=(8, 16, 16, 16)).save_pretrained(
        tmp_path
    )
    calls: list[tuple[str, int, int]] = []
    ref = load_controlnet(cpu_memory, tmp_path, torch.float32)
    cpu_memory.telemetry.subscribe_progress(lambda e: calls.append((e.component, e.done, e.total)))
    assert not calls  # registering reads nothing
    with cpu_memory.use(ref.handle):
        pass
    assert calls[0] == ("controlnet", 0, ref.handle.weight_bytes)
    assert calls[-1] == ("controlnet", ref.handle.weight_bytes, ref.handle.weight_bytes)


def test_a_library_imported_for_the_first_time_is_said_before_it_loads(
    tmp_path, monkeypatch, cpu_memory
) -> None:
    # The first model node of a session spends seconds importing diffusers/transformers: it says so first.
    import sys

    (tmp_path / "nodeloom_slow_library.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "nodeloom_slow_library", raising=False)
    seen: list[tuple[object, bool]] = []
    ctx = NodeContext(
        node_id="load",
        node_type="LoadDiffusionModel",
        memory=cpu_memory,
        out_dir=tmp_path,
        workflow_json={},
        emit=lambda e: seen.append((e, "nodeloom_slow_library" in sys.modules)),
        cancel=CancelToken(),
    )
    ctx.importing("nodeloom_slow_library")
    first, imported_yet = seen[0]
    assert isinstance(first, NodeProgress) and not imported_yet
    assert describe_progress(first)[0] == "importing nodeloom_slow_library"
    assert sys.modules["nodeloom_slow_library"].VALUE == 42
    count = len(seen)
    ctx.importing("nodeloom_slow_library")  # already imported: nothing to say
    assert len(seen) == count
    monkeypatch.delitem(sys.modules, "nodeloom_slow_library")

    import io

    from rich.console import Console

    from app.cli import HeadlessPrinter

    out = io.StringIO()
    with HeadlessPrinter(Console(file=out, width=120), quiet=False) as printer:
        for event, _ in seen:
            printer(event)  # type: ignore[arg-type]
    assert "load: importing nodeloom_slow_library (once per session)" in out.getvalue()
