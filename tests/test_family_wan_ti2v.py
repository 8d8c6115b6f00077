"""Wan 2.2 TI2V-5B end to end: one model, text-to-video and image-to-video, equal to diffusers' pipelines.

The folder is the tiny `demo:tiny-wan22-ti2v` fixture (a `WanPipeline` folder with `expand_timesteps`, a
48-channel Wan 2.2 VAE that folds pixels 2x2, 8x in space and 2x in time). Text to video is `txt2video.json`
(Empty Video Latent) against `WanPipeline`; image to video is `img2video.json` with its i2v node replaced by
Wan 2.2 Image To Video Latent (what a ComfyUI TI2V graph has) against `WanImageToVideoPipeline` loading the
same folder. Slow: each case builds and runs two tiny video pipelines.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.main import main
from tests.family_support import demo_folder, frames_in, run_workflow
from tests.test_family_wan import (
    FRAMES,
    HEIGHT,
    NEGATIVE,
    PROMPT,
    WIDTH,
    assert_same_video,
    run_cli,
    theirs,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
IMG2VIDEO = REPO / "resources/workflows/img2video.json"
START = REPO / "resources/images/shapes_sample.png"  # 64x64: resized to 48x32, as the pipeline resizes it


folder = demo_folder("tiny-wan22-ti2v")


def ti2v_workflow(tmp_path: Path, *, image: bool) -> Path:
    spec = json.loads(IMG2VIDEO.read_text())
    nodes = spec["nodes"]
    inputs = {"vae": ["load", "vae"]}
    if image:
        inputs["start_image"] = ["image", "image"]
    else:
        del nodes["image"]
        del spec["ui"]["nodes"]["image"]
    nodes["i2v"] = {
        "type": "Wan22ImageToVideoLatent",
        "params": {"width": WIDTH, "height": HEIGHT, "length": FRAMES, "batch_size": 1},
        "inputs": inputs,
    }
    nodes["sampler"]["inputs"].update(
        positive=["positive", "conditioning"], negative=["negative", "conditioning"], latent=["i2v", "latent"]
    )
    path = tmp_path / f"ti2v-{image}.json"
    path.write_text(json.dumps(spec))
    return path


def run_ti2v(folder: Path, out: Path, *, image: bool, cfg: float = 5.0) -> int:
    values = {
        "load.path": str(folder),
        "sampler.scheduler": "default",
        "sampler.steps": 4,
        "sampler.cfg": cfg,
        "sampler.seed": 42,
        "positive.text": PROMPT,
        "negative.text": NEGATIVE,
        "save.format": "png",
        **({"image.path": str(START)} if image else {}),
    }
    return run_workflow(ti2v_workflow(out.parent, image=image), out, values)


def theirs_i2v(folder: Path, monkeypatch: pytest.MonkeyPatch, *, cfg: float = 5.0) -> np.ndarray:
    from diffusers import WanImageToVideoPipeline
    from diffusers.pipelines.wan import pipeline_wan, pipeline_wan_i2v

    # The I2V module's prompt_clean calls ftfy unconditionally (not installed here); WanPipeline's, which we
    # follow, calls it where installed. Our prompts are plain ASCII: ftfy would not change them.
    monkeypatch.setattr(pipeline_wan_i2v, "prompt_clean", pipeline_wan.prompt_clean)
    pipe = WanImageToVideoPipeline.from_pretrained(str(folder), dtype=torch.float32)
    assert pipe.config.expand_timesteps  # read from the folder's model_index.json
    pipe.set_progress_bar_config(disable=True)
    video = pipe(
        image=Image.open(START).convert("RGB"),
        prompt=PROMPT,
        negative_prompt=NEGATIVE,
        height=HEIGHT,
        width=WIDTH,
        num_frames=FRAMES,
        num_inference_steps=4,
        guidance_scale=cfg,
        generator=torch.Generator("cpu").manual_seed(42),
        output_type="np",
    ).frames[0]
    return (video * 255).round().astype(np.uint8)


def test_text_to_video_matches_wan_pipeline(folder: Path, tmp_path: Path) -> None:
    """Through the shipped txt2video.json (Empty Video Latent): every token at the step's timestep."""
    out = tmp_path / "out"
    assert run_cli(folder, out, cfg=5.0) == 0
    assert_same_video(frames_in(out), theirs(folder, cfg=5.0))


def test_the_tiny_vae_is_the_wan22_kind(folder: Path) -> None:
    config = json.loads((folder / "vae" / "config.json").read_text())
    assert config["z_dim"] == 48 and config["is_residual"] and config["patch_size"] == 2
    assert json.loads((folder / "model_index.json").read_text())["expand_timesteps"] is True


def test_image_to_video_matches_the_i2v_pipeline(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start image's latents are the first latent frame at timestep 0, put back after the last step."""
    out = tmp_path / "out"
    assert run_ti2v(folder, out, image=True) == 0
    ours = frames_in(out)
    assert_same_video(ours, theirs_i2v(folder, monkeypatch))
    text_only = tmp_path / "text-only"
    assert run_ti2v(folder, text_only, image=False) == 0  # the same node without an image: text to video
    assert_same_video(frames_in(text_only), theirs(folder, cfg=5.0))
    assert not np.array_equal(ours, frames_in(text_only))  # the image took effect


def test_a_first_frame_latent_for_a_model_without_per_token_timesteps_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--run", str(ti2v_workflow(tmp_path, image=True)), "--out", str(tmp_path / "o"), "--quiet"]
    args += ["--set", "load.path=demo:tiny-wan", "--set", f"image.path={START}"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "Wan 2.2 TI2V" in err and "Traceback" not in err


@pytest.mark.parametrize(("width", "height", "frames"), [(1280, 704, 121), (832, 480, 49)])
def test_working_memory_formula_covers_the_full_size_ti2v_transformer(
    width: int, height: int, frames: int
) -> None:
    """TI2V-5B's widths (24 heads x 128, ffn 14336, 48 channels) at its 16x/4x VAE, with a timestep per token
    (meta device, tests/live_tensors.py; two blocks: the peak is within one)."""
    from diffusers import WanTransformer3DModel

    from pipelines.diffusion.families import FAMILIES
    from pipelines.diffusion.values import DenoiserRef
    from pipelines.diffusion.wan_sampling import wan_working
    from tests.live_tensors import live_tensor_peak

    meta = torch.device("meta")
    with meta:
        model = WanTransformer3DModel(
            num_layers=2,
            num_attention_heads=24,
            ffn_dim=14336,
            text_dim=4096,
            in_channels=48,
            out_channels=48,
        )
    latents = torch.zeros(1, 48, (frames - 1) // 4 + 1, height // 16, width // 16, device=meta)
    tokens = latents.shape[2] * (latents.shape[3] // 2) * (latents.shape[4] // 2)
    text = torch.zeros(1, 512, 4096, device=meta)
    measured = live_tensor_peak(
        model,
        lambda: model(
            hidden_states=latents,
            timestep=torch.zeros(1, tokens, device=meta),
            encoder_hidden_states=text,
            return_dict=False,
        ),
    )
    ref = DenoiserRef(None, FAMILIES["wan"], dict(model.config), {}, torch.float32, expand_timesteps=True)  # type: ignore[arg-type]
    formula = wan_working(ref, tuple(latents.shape)).formula_bytes
    # Never below what is alive (a budget would be overrun), at most 15% above (measured 1.03-1.06x).
    print(f"ti2v working {width}x{height}x{frames}: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"
