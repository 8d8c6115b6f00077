"""Single-file checkpoints as first-class lazy components: exact bytes from the header, a key map traced
through diffusers' converters, tensors loaded one at a time into empty modules, streamed from the file.

What a user checks: the ledger shows every component's size before anything loads; `none`, `sequential` and
`stream` give the same picture as the diffusers folder of the same weights; loading needs no more memory
than the weights themselves (no state dict next to the model).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from diffusers import DiffusionPipeline, UNet2DConditionModel

from memory import MemoryConfig, MemoryManager, TransferEvent
from pipelines.diffusion.conditioning import encode_prompt
from pipelines.diffusion.demo_models import ensure_demo_model
from pipelines.diffusion.denoising import sample
from pipelines.diffusion.export import save_sd1_single_file, save_sdxl_single_file
from pipelines.diffusion.lazy_load import CheckpointSource, empty_module, lazy_load, trace_conversion
from pipelines.diffusion.loading import load_model
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.vae import decode
from pipelines.diffusion.values import Latents

# Integration and parity: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_sd() -> tuple[Path, Path]:
    """(single file in the original layout, the diffusers folder it was written from)."""
    folder = ensure_demo_model("tiny-sd")
    pipe = DiffusionPipeline.from_pretrained(str(folder))
    out = Path(os.environ["NODELOOM_DATA_DIR"]) / "lazy-tiny-sd.safetensors"
    return save_sd1_single_file(pipe.unet, pipe.vae, pipe.text_encoder, out), folder


@pytest.fixture(scope="module")
def tiny_sdxl() -> tuple[Path, Path]:
    folder = ensure_demo_model("tiny-sdxl")
    pipe = DiffusionPipeline.from_pretrained(str(folder))
    out = Path(os.environ["NODELOOM_DATA_DIR"]) / "lazy-tiny-sdxl.safetensors"
    return save_sdxl_single_file(pipe.unet, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, out), folder


def picture(
    spec: Path, config_dir: Path | None, policy: str, budget: str | None = None
) -> tuple[torch.Tensor, int]:
    """The decoded image and how many bytes were streamed from disk while making it."""
    with MemoryManager(MemoryConfig(device="cpu", policy=policy, ram_budget=budget)) as mm:
        model = load_model(mm, str(spec), config_dir=config_dir)
        pos = encode_prompt(mm, model.text_encoder, "a red circle")
        neg = encode_prompt(mm, model.text_encoder, "")
        latents = Latents(torch.zeros(1, 4, 8, 8), 8)
        settings = SamplerSettings("euler", steps=3, cfg=5.0, seed=11)
        image = decode(mm, model.vae, sample(mm, model.denoiser, pos, neg, latents, settings))
        streamed = sum(e.nbytes for e in mm.telemetry.events(TransferEvent) if "streamed" in e.component)
    return image, streamed


@pytest.fixture(scope="module")
def tiny_sd_reference(tiny_sd) -> torch.Tensor:
    """The diffusers folder's picture under `none`: made once, what every policy's pictures are compared to."""
    return picture(tiny_sd[1], None, "none")[0]


@pytest.mark.parametrize("policy", ["none", "sequential", "stream"])
def test_policies_give_the_folder_picture_bit_for_bit(tiny_sd, tiny_sd_reference, policy: str) -> None:
    path, folder = tiny_sd
    reference = tiny_sd_reference
    # 3.5 MiB: less than the tiny UNet (4.2 MiB), so `stream` has to stream it.
    budget = "3500KiB" if policy == "stream" else None
    for spec, config_dir in ((path, folder), (folder, None)):
        image, streamed = picture(spec, config_dir, policy, budget)
        assert torch.equal(image, reference), (spec.name, policy)
        assert (streamed > 0) == (policy == "stream"), (spec.name, policy, streamed)


def test_sdxl_single_file_streams_to_the_folder_picture(tiny_sdxl) -> None:
    path, folder = tiny_sdxl
    reference, _ = picture(folder, None, "none")
    image, streamed = picture(path, folder, "stream", "7MiB")  # UNet 7.5 MiB
    assert streamed > 0
    assert torch.equal(image, reference)


def test_ledger_knows_every_component_before_loading(tiny_sdxl) -> None:
    path, folder = tiny_sdxl
    with MemoryManager(MemoryConfig(device="cpu", policy="sequential")) as mm:
        load_model(mm, str(path), config_dir=folder)
        handles = list(mm.ledger.handles.values())
        assert {h.spec.name for h in handles} == {"unet", "vae", "text_encoder", "text_encoder_2"}
        assert all(h.module is None for h in handles)
        assert "?" not in mm.ledger_text()
        for h in handles:
            with mm.use(h) as module:
                state = module.state_dict()  # the weights (non-persistent buffers are made, not loaded)
                assert h.weight_bytes == sum(t.numel() * t.element_size() for t in state.values()), (
                    h.spec.name
                )
                assert not any(t.is_meta for t in state.values())


def test_key_map_comes_from_the_header_and_diffusers_converter(tiny_sdxl) -> None:
    # SDXL's OpenCLIP stores q, k and v in one `in_proj_weight`: the traced map reads that one tensor and
    # replays diffusers' split; the UNet's entries are plain renames.
    from diffusers.loaders.single_file_utils import convert_ldm_unet_checkpoint

    from pipelines.diffusion.single_file import _text_encoder_key_map

    path, folder = tiny_sdxl
    pipe = DiffusionPipeline.from_pretrained(str(folder))
    encoder = empty_module(lambda: type(pipe.text_encoder_2)(pipe.text_encoder_2.config))
    key_map = _text_encoder_key_map(path, "sdxl", 1, encoder)
    q = key_map["text_model.encoder.layers.0.self_attn.q_proj.weight"]
    assert q.keys == ("conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight",)
    assert not q.is_rename
    loaded = dict(CheckpointSource(path, key_map).load(list(key_map), torch.float32))
    for name, t in pipe.text_encoder_2.state_dict().items():
        if name in key_map:
            assert torch.equal(loaded[name], t), name

    unet_map = trace_conversion(
        path, lambda sd: convert_ldm_unet_checkpoint(sd, dict(pipe.unet.config)), ("model.diffusion_model.",)
    )
    assert all(r.is_rename for r in unet_map.values())
    unet = lazy_load(
        path,
        unet_map,
        empty_module(lambda: UNet2DConditionModel.from_config(pipe.unet.config)),
        torch.float32,
    )
    for name, t in pipe.unet.state_dict().items():
        assert torch.equal(unet.state_dict()[name], t), name


PEAK_CHILD = r"""
import json, sys
from pathlib import Path
import torch
from memory import MemoryConfig, MemoryManager
from memory.devices import peak_rss, read_host
from pipelines.diffusion.loading import load_model

torch.set_num_threads(1)
path, folder = sys.argv[1], Path(sys.argv[2])
rows = []
with MemoryManager(MemoryConfig(device="cpu", policy="sequential")) as mm:
    model = load_model(mm, path, config_dir=folder)
    for h in [model.denoiser.handle, model.vae.handle, *model.text_encoder.handles]:
        before = read_host().rss
        with mm.use(h) as module:
            largest = max(t.numel() * t.element_size() for t in module.state_dict().values())
            rows.append({"name": h.spec.name, "bytes": h.weight_bytes, "largest": largest, "before": before})
        break  # the UNet only: VmHWM can't be reset (and must not be), so one load per process
print(json.dumps({"rows": rows, "peak": peak_rss()}))
"""


@pytest.fixture(scope="module")
def fp16_sd_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An SD1-shaped single file in float16 with a ~75 MB UNet (149 MiB in float32), and its config folder."""
    folder = tmp_path_factory.mktemp("fp16-sd")
    pipe = DiffusionPipeline.from_pretrained(str(ensure_demo_model("tiny-sd")))
    torch.manual_seed(0)
    config = {**dict(pipe.unet.config), "block_out_channels": (192, 384)}
    pipe.unet = UNet2DConditionModel.from_config(config)
    pipe = pipe.to(torch.float16)
    pipe.save_pretrained(folder / "config")
    for weights in (folder / "config").glob("*/*.safetensors"):
        weights.unlink()  # configs and tokenizer only: the single file is the one copy of the weights
    return save_sd1_single_file(
        pipe.unet, pipe.vae, pipe.text_encoder, folder / "sd.safetensors"
    ), folder / "config"


@pytest.mark.slow
def test_load_peak_is_weights_plus_largest_tensor(fp16_sd_file) -> None:
    # Before: diffusers' from_single_file read the float16 state dict (touching every page) and then cast
    # into a float32 model, peaking ~1.5x the weights. Now: the model's bytes + one tensor + a small constant.
    path, config_dir = fp16_sd_file
    out = subprocess.run(
        [sys.executable, "-c", PEAK_CHILD, str(path), str(config_dir)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    (unet,) = data["rows"]
    assert unet["bytes"] > 130 * 1024**2
    growth = data["peak"] - unet["before"]
    assert growth <= unet["bytes"] + unet["largest"] + 12 * 1024**2, (growth, unet)


def test_traced_recipes_replay_splits_and_concatenations(tmp_path: Path) -> None:
    # Converters for DiT single files (Flux, SD3) split fused tensors and re-concatenate halves
    # (`swap_scale_shift`): every op the converter ran on a stub is replayed on the real tensor.
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    fused = torch.randn(6, 4, generator=g, dtype=torch.float16)
    mod = torch.randn(8, dtype=torch.float16, generator=g)
    proj = torch.randn(4, 2, generator=g)
    save_file({"qkv": fused, "mod": mod, "proj": proj}, str(tmp_path / "f.safetensors"))

    def convert(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        q, k, v = torch.chunk(sd.pop("qkv"), 3, dim=0)
        shift, scale = sd["mod"].chunk(2, dim=0)
        return {"q": q, "k": k, "v": v, "mod": torch.cat([scale, shift]), "proj": sd["proj"].T.contiguous()}

    key_map = trace_conversion(tmp_path / "f.safetensors", convert)
    assert key_map["q"].keys == ("qkv",) and key_map["mod"].keys == ("mod",)
    source = CheckpointSource(tmp_path / "f.safetensors", key_map)
    assert source.nbytes(torch.float32) == (24 + 8 + 8) * 4
    with torch.no_grad():
        real = dict(source.load(list(key_map), torch.float32))
    expected = convert({"qkv": fused, "mod": mod, "proj": proj})
    for name in ("q", "k", "v", "mod", "proj"):
        assert torch.equal(real[name], expected[name].float()), name
