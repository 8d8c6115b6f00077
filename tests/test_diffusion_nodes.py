"""The diffusion nodes in a real workflow: txt2img.json through the executor on the tiny demo SD model.

Checks what the graph promises beyond parity: loaders are lazy, the sequential policy unloads each model
before the next loads, the sampler reports every step with latent previews and stops when cancelled,
img2img (VAEEncode + denoise < 1) runs, and a bad wiring fails with a clear message.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from PIL import Image

from memory import LoadEvent, MemoryConfig, MemoryManager, UnloadEvent
from nodes.context import CancelToken
from nodes.events import NodePreview, NodeProgress
from nodes.executor import Executor
from nodes.registry import default_registry
from nodes.workflow import load_workflow, workflow_from_dict
from pipelines.diffusion.loading import load_model

# Integration: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

WORKFLOW = Path(__file__).resolve().parent.parent / "resources" / "workflows" / "txt2img.json"


@pytest.fixture(scope="module")
def data_dir():
    """The session's data dir (tests/conftest.py), where demo models are built once and shared."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield Path(os.environ["NODELOOM_DATA_DIR"])


def txt2img(registry, **params: object):
    """txt2img.json on the demo model, with `node.param` overrides."""
    data = json.loads(WORKFLOW.read_text())
    data["nodes"]["load"]["params"]["path"] = "demo:tiny-sd"
    data["nodes"]["sampler"]["params"]["steps"] = 4
    for key, value in params.items():
        node, param = key.split("__")
        data["nodes"][node]["params"][param] = value
    return workflow_from_dict(data, registry)


def test_workflow_file_is_valid_and_uses_the_expected_ids() -> None:
    registry = default_registry(entry_point_packs=False)
    wf = load_workflow(WORKFLOW, registry)
    assert set(wf.nodes) == {"load", "positive", "negative", "latent", "sampler", "decode", "save"}
    assert wf.nodes["load"].params["path"] == "builtin:shapes-sd"
    sampler = wf.nodes["sampler"].params
    assert (sampler["scheduler"], sampler["steps"], sampler["cfg"], sampler["seed"]) == (
        "dpmpp_2m",
        20,
        4.0,
        42,
    )
    assert wf.nodes["positive"].params["text"] == "a small yellow triangle on a black background"


def test_loader_is_lazy(data_dir) -> None:
    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    model = load_model(mm, "demo:tiny-sd")
    handles = [model.denoiser.handle, model.vae.handle, *model.text_encoder.handles]
    assert all(h.module is None and h.location == "disk" for h in handles)
    # Byte sizes are known from the safetensors headers before anything loads.
    assert all(h.weight_bytes and h.weight_bytes > 0 for h in handles)
    assert not mm.telemetry.events(LoadEvent)


def test_txt2img_sequential_loads_each_model_once_and_unloads_it_before_the_next(data_dir, tmp_path) -> None:
    registry = default_registry(entry_point_packs=False)
    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    events: list[object] = []
    result = Executor(registry, memory=mm).run(txt2img(registry), out_dir=tmp_path, on_event=events.append)
    assert result.ok, result.error
    image = result.outputs["decode"]["image"]
    assert image.shape == (1, 64, 64, 3) and image.dtype == torch.float32
    assert 0.0 <= image.min().item() and image.max().item() <= 1.0
    assert result.nodes["save"].files and Image.open(result.nodes["save"].files[0]).size == (64, 64)

    # Order of loads and unloads: text encoder (once: the negative and positive prompts run back to back,
    # so it stays for the second), then UNet, then VAE, each unloaded before the next one is loaded.
    timeline = [
        (type(e).__name__[:-5].lower(), e.component)
        for e in mm.telemetry.events()
        if isinstance(e, (LoadEvent, UnloadEvent))
    ]
    assert timeline == [
        ("load", "text_encoder"),
        ("unload", "text_encoder"),
        ("load", "unet"),
        ("unload", "unet"),
        ("load", "vae"),
        ("unload", "vae"),
    ]
    report = mm.report()
    mm.close()
    assert [row["location"] for row in report["ledger"]] == ["disk"] * 3
    assert sorted(load["component"] for load in report["loads"]) == ["text_encoder", "unet", "vae"]
    assert len([s for s in report["steps"] if s["kind"] == "sampler_step"]) == 4
    # Every working-memory reservation says where its figure came from.
    assert {r["component"] for r in report["reservations"]} == {"text_encoder", "unet", "vae"}
    assert all(r["source"] in ("formula", "learned") for r in report["reservations"])

    progress = [e for e in events if isinstance(e, NodeProgress) and e.kind == "sampler_step"]
    assert [(p.step, p.total) for p in progress] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    previews = [e for e in events if isinstance(e, NodePreview) and e.node_id == "sampler"]
    assert previews and all(isinstance(p.image, Image.Image) for p in previews)


def test_cancel_stops_the_sampler_and_releases_the_unet(data_dir, tmp_path) -> None:
    registry = default_registry(entry_point_packs=False)
    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    cancel = CancelToken()

    def on_event(event: object) -> None:
        if isinstance(event, NodeProgress) and event.kind == "sampler_step" and event.step == 2:
            cancel.cancel()

    result = Executor(registry, memory=mm).run(
        txt2img(registry, sampler__steps=10), out_dir=tmp_path, on_event=on_event, cancel=cancel
    )
    assert result.cancelled and not result.ok
    assert result.nodes["sampler"].status == "cancelled"
    assert len([s for s in mm.report()["steps"] if s["kind"] == "sampler_step"]) == 2
    assert all(h.locks == 0 and h.module is None for h in mm.ledger.handles.values())


def test_img2img_with_vae_encode_and_partial_denoise(data_dir, tmp_path) -> None:
    registry = default_registry(entry_point_packs=False)
    data = json.loads(WORKFLOW.read_text())
    nodes = data["nodes"]
    nodes["load"]["params"]["path"] = "demo:tiny-sd"
    nodes["first"] = {
        "type": "VAEDecode",
        "params": {},
        "inputs": {"vae": ["load", "vae"], "latent": ["sampler", "latent"]},
    }
    nodes["encode"] = {
        "type": "VAEEncode",
        "params": {},
        "inputs": {"vae": ["load", "vae"], "image": ["first", "image"]},
    }
    nodes["again"] = {
        "type": "Sampler",
        "params": {**nodes["sampler"]["params"], "denoise": 0.5, "steps": 4},
        "inputs": {**nodes["sampler"]["inputs"], "latent": ["encode", "latent"]},
    }
    nodes["sampler"]["params"]["steps"] = 2
    nodes["decode"]["inputs"]["latent"] = ["again", "latent"]
    mm = MemoryManager(MemoryConfig(device="cpu", policy="none"))
    events: list[object] = []
    result = Executor(registry, memory=mm).run(
        workflow_from_dict(data, registry), out_dir=tmp_path, on_event=events.append
    )
    assert result.ok, result.error
    assert result.outputs["encode"]["latent"].samples.shape == (1, 4, 8, 8)
    # denoise 0.5 of 4 steps runs the last 2 of the schedule.
    assert [
        e.total
        for e in events
        if isinstance(e, NodeProgress) and e.node_id == "again" and e.kind == "sampler_step"
    ] == [2, 2]
    out = result.outputs["decode"]["image"]
    assert out.shape == (1, 64, 64, 3) and torch.isfinite(out).all()


def test_conditioning_from_another_family_is_refused(data_dir, tmp_path) -> None:
    registry = default_registry(entry_point_packs=False)
    data = json.loads(WORKFLOW.read_text())
    data["nodes"]["load"]["params"]["path"] = "demo:tiny-sd"
    data["nodes"]["xl"] = {"type": "LoadDiffusionModel", "params": {"path": "demo:tiny-sdxl"}, "inputs": {}}
    data["nodes"]["positive"]["inputs"]["text_encoder"] = ["xl", "text_encoder"]
    result = Executor(registry, memory=MemoryManager(MemoryConfig(device="cpu", policy="none"))).run(
        workflow_from_dict(data, registry), out_dir=tmp_path
    )
    assert not result.ok and result.failed_node == "sampler"
    assert "sdxl" in result.error and "sd" in result.error


def test_img2img_workflow_file_runs(data_dir, tmp_path) -> None:
    registry = default_registry(entry_point_packs=False)
    picture = tmp_path / "in.png"
    Image.new("RGB", (70, 64), (200, 30, 30)).save(picture)  # 70 is rounded down to 64 by the VAE processor
    wf = load_workflow(WORKFLOW.parent / "img2img.json", registry)
    wf.nodes["load"].params["path"] = "demo:tiny-sd"
    wf.nodes["image"].params["path"] = str(picture)
    wf.nodes["sampler"].params["steps"] = 4
    result = Executor(registry, memory=MemoryManager(MemoryConfig(device="cpu", policy="sequential"))).run(
        wf, out_dir=tmp_path / "out"
    )
    assert result.ok, result.error
    assert result.outputs["decode"]["image"].shape == (1, 64, 64, 3)


def test_flux_workflow_file_runs(data_dir, tmp_path) -> None:
    registry = default_registry(entry_point_packs=False)
    wf = load_workflow(WORKFLOW.parent / "txt2img_flux.json", registry)
    wf.nodes["sampler"].params["steps"] = 3
    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    result = Executor(registry, memory=mm).run(wf, out_dir=tmp_path)
    assert result.ok, result.error
    assert result.outputs["latent"]["latent"].samples.shape == (1, 4, 8, 8)
    assert result.outputs["decode"]["image"].shape == (1, 64, 64, 3)
    loads = [e.component for e in mm.telemetry.events(LoadEvent)]
    assert loads == ["text_encoder", "text_encoder_2", "transformer", "vae"]


@pytest.mark.parametrize("layout", ["diffusers", "original"])
def test_separate_vae_and_unet_files(data_dir, tmp_path, layout: str) -> None:
    # A standalone VAE / UNet .safetensors (as shared next to checkpoints) replaces the model's own.
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from safetensors.torch import save_file

    from pipelines.diffusion.demo_models import ensure_demo_model
    from pipelines.diffusion.export import UNET_PREFIX, VAE_PREFIX, unet_to_original, vae_to_original

    folder = ensure_demo_model("tiny-sd")
    vae = AutoencoderKL.from_pretrained(folder / "vae")
    unet = UNet2DConditionModel.from_pretrained(folder / "unet")
    vae_state, unet_state = vae.state_dict(), unet.state_dict()
    if layout == "original":  # standalone VAE files carry no prefix; UNet files keep model.diffusion_model.
        vae_state = {
            k.removeprefix(VAE_PREFIX): v for k, v in vae_to_original(vae_state, dict(vae.config)).items()
        }
        unet_state = unet_to_original(unet_state, dict(unet.config))
        assert all(k.startswith(UNET_PREFIX) for k in unet_state)
    save_file({k: v.contiguous() for k, v in vae_state.items()}, str(tmp_path / "vae.safetensors"))
    save_file({k: v.contiguous() for k, v in unet_state.items()}, str(tmp_path / "unet.safetensors"))

    registry = default_registry(entry_point_packs=False)
    wf = txt2img(registry)
    reference = Executor(registry, memory=MemoryManager(MemoryConfig(device="cpu", policy="none"))).run(
        wf, out_dir=tmp_path / "a"
    )
    data = wf.to_dict()
    data["nodes"]["vae_file"] = {
        "type": "LoadVAE",
        "inputs": {},
        "params": {"path": str(tmp_path / "vae.safetensors"), "family": "sd", "config_dir": str(folder)},
    }
    data["nodes"]["unet_file"] = {
        "type": "LoadDenoiser",
        "inputs": {"reference": ["load", "denoiser"]},
        "params": {"path": str(tmp_path / "unet.safetensors"), "family": "sd", "config_dir": str(folder)},
    }
    data["nodes"]["decode"]["inputs"]["vae"] = ["vae_file", "vae"]
    data["nodes"]["sampler"]["inputs"]["denoiser"] = ["unet_file", "denoiser"]
    mm = MemoryManager(MemoryConfig(device="cpu", policy="none"))
    result = Executor(registry, memory=mm).run(workflow_from_dict(data, registry), out_dir=tmp_path / "b")
    assert result.ok, result.error
    assert {e.component for e in mm.telemetry.events(LoadEvent)} >= {"vae", "unet"}
    assert any(str(tmp_path / "vae.safetensors") in key for key in mm.ledger.handles)
    assert torch.equal(result.outputs["decode"]["image"], reference.outputs["decode"]["image"])
