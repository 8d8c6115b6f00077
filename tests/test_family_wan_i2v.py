"""Wan image-to-video end to end: `app --run img2video.json` gives WanImageToVideoPipeline's frames.

The folders are the tiny `demo:tiny-wan-i2v` (Wan 2.1 I2V: a CLIP vision encoder beside the transformer),
`demo:tiny-wan-flf2v` (Wan 2.1 FLF2V: the same over two pictures) and `demo:tiny-wan22-i2v` (Wan 2.2 A14B I2V:
two experts, no image encoder) fixtures, saved to plain folders and
loaded by path. Our side is the CLI: the Wan Image To Video / First Last Frame node (VAE-encoded conditioning
frames and mask), our loop and VAE Decode Video; theirs is `WanImageToVideoPipeline.from_pretrained` with the
same picture, seed, steps, guidance, size, frames and prompts. All slow: each case builds and runs two tiny
video pipelines (seconds).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.main import main
from pipelines.diffusion.family_detect import detect_family
from tests.family_support import demo_folder, frames_in, run_workflow
from tests.test_family_wan import FRAMES, HEIGHT, NEGATIVE, PROMPT, WIDTH, assert_same_video

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
IMG2VIDEO = REPO / "resources/workflows/img2video.json"
START = REPO / "resources/images/shapes_sample.png"  # 64x64: resized to 48x32, as the pipeline resizes it


folder21 = demo_folder("tiny-wan-i2v")


folder22 = demo_folder("tiny-wan22-i2v")


folder_flf = demo_folder("tiny-wan-flf2v")


@pytest.fixture(scope="module")
def end_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another picture for the last frame: the start one flipped and tinted, so the two ends differ."""
    path = tmp_path_factory.mktemp("end") / "end.png"
    picture = np.asarray(Image.open(START).convert("RGB"))[:, ::-1].copy()
    picture[..., 1] = 255 - picture[..., 1]
    Image.fromarray(picture).save(path)
    return path


def workflow(tmp_path: Path, *, last: Path | None) -> Path:
    """img2video.json, or its first-last-frame form: the i2v node swapped for WanFirstLastFrameToVideo with an
    end image wired in (what a user does in the editor)."""
    if last is None:
        return IMG2VIDEO
    spec = json.loads(IMG2VIDEO.read_text())
    nodes = spec["nodes"]
    nodes["end"] = {"type": "LoadImage", "params": {"path": str(last)}, "inputs": {}}
    nodes["i2v"]["type"] = "WanFirstLastFrameToVideo"
    nodes["i2v"]["inputs"]["end_image"] = ["end", "image"]
    path = tmp_path / "flf2video.json"
    path.write_text(json.dumps(spec))
    return path


def run_cli(
    folder: Path,
    out: Path,
    *,
    cfg: float,
    steps: int = 4,
    start: Path = START,
    last: Path | None = None,
    extra: tuple[str, ...] = (),
    scheduler: str = "default",
) -> int:
    values = {
        "load.path": str(folder),
        "image.path": str(start),
        "sampler.scheduler": scheduler,
        "sampler.steps": steps,
        "sampler.cfg": cfg,
        "sampler.seed": 42,
        "i2v.width": WIDTH,
        "i2v.height": HEIGHT,
        "i2v.length": FRAMES,
        "positive.text": PROMPT,
        "negative.text": NEGATIVE,
        "save.format": "png",
    }
    return run_workflow(workflow(out.parent, last=last), out, values, extra)


def theirs(
    folder: Path, monkeypatch: pytest.MonkeyPatch, *, cfg: float, steps: int = 4, last: Path | None = None
) -> np.ndarray:
    from diffusers import WanImageToVideoPipeline
    from diffusers.pipelines.wan import pipeline_wan, pipeline_wan_i2v

    # The I2V module's prompt_clean calls ftfy unconditionally (not installed here); WanPipeline's, which we
    # follow, calls it where installed. Our prompts are plain ASCII: ftfy would not change them.
    monkeypatch.setattr(pipeline_wan_i2v, "prompt_clean", pipeline_wan.prompt_clean)
    pipe = WanImageToVideoPipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    video = pipe(
        image=Image.open(START).convert("RGB"),
        last_image=Image.open(last).convert("RGB") if last is not None else None,
        prompt=PROMPT,
        negative_prompt=NEGATIVE,
        height=HEIGHT,
        width=WIDTH,
        num_frames=FRAMES,
        num_inference_steps=steps,
        guidance_scale=cfg,
        generator=torch.Generator("cpu").manual_seed(42),
        output_type="np",
    ).frames[0]
    return (video * 255).round().astype(np.uint8)


# Wan 2.1 I2V: CLIP image states in every call; cfg 5 mixes conditional and unconditional, cfg 1 has no guidance.
@pytest.mark.parametrize("cfg", [5.0, 1.0])
def test_wan21_i2v_frames_match_the_pipeline(
    folder21: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cfg: float
) -> None:
    out = tmp_path / "out"
    assert run_cli(folder21, out, cfg=cfg) == 0
    assert_same_video(frames_in(out), theirs(folder21, monkeypatch, cfg=cfg))


def test_wan22_i2v_experts_match_the_pipeline_and_never_share_memory(
    folder22: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 steps at flow shift 3 cross the 0.9 boundary: both experts run, one after the other."""
    out, report = tmp_path / "out", tmp_path / "report.json"
    extra = ("--offload", "sequential", "--report", str(report))
    assert run_cli(folder22, out, cfg=5.0, steps=8, extra=extra) == 0
    assert_same_video(frames_in(out), theirs(folder22, monkeypatch, cfg=5.0, steps=8))
    memory = json.loads(report.read_text())["memory"]
    loads = {e["component"]: e for e in memory["loads"]}
    unloads = {e["component"]: e for e in memory["unloads"]}
    assert loads["transformer"]["kind"] == loads["transformer_2"]["kind"] == "denoiser"
    assert unloads["transformer"]["t"] <= loads["transformer_2"]["t"]


def test_first_last_frame_matches_the_pipelines_last_image(
    folder22: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, end_image: Path
) -> None:
    out = tmp_path / "out"
    assert run_cli(folder22, out, cfg=5.0, last=end_image) == 0
    ours = frames_in(out)
    assert_same_video(ours, theirs(folder22, monkeypatch, cfg=5.0, last=end_image))
    start_only = tmp_path / "start-only"
    assert run_cli(folder22, start_only, cfg=5.0) == 0
    assert not np.array_equal(ours, frames_in(start_only))  # the last frame took effect


def test_wan21_flf2v_matches_the_pipeline_with_both_pictures_clip_states(
    folder_flf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, end_image: Path
) -> None:
    """Wan 2.1 FLF2V: the first and last pictures' CLIP states go in together (its `pos_embed_seq_len`)."""
    out = tmp_path / "out"
    assert run_cli(folder_flf, out, cfg=5.0, last=end_image) == 0
    assert_same_video(frames_in(out), theirs(folder_flf, monkeypatch, cfg=5.0, last=end_image))


def test_k_euler_is_euler_for_image_to_video(folder22: Path, tmp_path: Path) -> None:
    """ComfyUI graphs say k_euler: on Wan it is flow-matching Euler, start-frame channels and all."""
    assert run_cli(folder22, tmp_path / "k", cfg=5.0, scheduler="k_euler") == 0
    assert run_cli(folder22, tmp_path / "e", cfg=5.0, scheduler="euler") == 0
    assert np.array_equal(frames_in(tmp_path / "k"), frames_in(tmp_path / "e"))


def test_the_start_image_changes_the_video(folder21: Path, tmp_path: Path, end_image: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli(folder21, a, cfg=5.0) == 0
    assert run_cli(folder21, b, cfg=5.0, start=end_image) == 0
    assert not np.array_equal(frames_in(a), frames_in(b))


def test_the_shipped_workflow_runs_on_the_tiny_demo_model(tmp_path: Path) -> None:
    args = ["--run", str(IMG2VIDEO), "--out", str(tmp_path), "--quiet", "--set", "save.format=png"]
    assert main(args) == 0
    spec = json.loads(IMG2VIDEO.read_text())["nodes"]
    assert spec["load"]["params"]["path"] == "demo:tiny-wan-i2v"
    assert len(frames_in(tmp_path)) == spec["i2v"]["params"]["length"]


def test_folders_are_detected_as_wan(folder21: Path, folder22: Path) -> None:
    assert detect_family(folder21) == detect_family(folder22) == "wan"


def test_an_i2v_model_fed_an_empty_video_latent_is_refused(
    folder21: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    txt2video = REPO / "resources/workflows/txt2video.json"
    args = ["--run", str(txt2video), "--out", str(tmp_path), "--quiet", "--set", f"load.path={folder21}"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "Wan Image To Video" in err and "sampler" in err and "Traceback" not in err


def test_a_t2v_model_fed_an_image_latent_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--run", str(IMG2VIDEO), "--out", str(tmp_path), "--quiet", "--set", "load.path=demo:tiny-wan"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "Empty Video Latent" in err and "Traceback" not in err


def test_a_last_frame_for_a_one_image_clip_model_is_refused(
    folder21: Path, tmp_path: Path, end_image: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Wan 2.1 I2V's transformer sees one picture's CLIP states; two need the FLF2V model's position table."""
    assert run_cli(folder21, tmp_path / "out", cfg=5.0, last=end_image) == 1
    err = capsys.readouterr().err
    assert "first-last-frame model" in err and "Traceback" not in err


def test_working_memory_formula_covers_the_full_size_i2v_transformer() -> None:
    """Wan 2.1 I2V 14B (36 input channels, 257 CLIP tokens beside the 512 text ones) at 832x480x81 on the meta
    device (tests/live_tensors.py; two blocks: the peak is within one): the text-to-video formula holds."""
    from diffusers import WanTransformer3DModel

    from pipelines.diffusion.families import FAMILIES
    from pipelines.diffusion.values import DenoiserRef
    from pipelines.diffusion.wan_sampling import wan_working
    from tests.live_tensors import live_tensor_peak

    meta = torch.device("meta")
    with meta:
        model = WanTransformer3DModel(
            num_layers=2, num_attention_heads=40, ffn_dim=13824, text_dim=4096, in_channels=36, image_dim=1280
        )
    latents = torch.zeros(1, 36, 21, 60, 104, device=meta)
    text, image = torch.zeros(1, 512, 4096, device=meta), torch.zeros(1, 257, 1280, device=meta)
    measured = live_tensor_peak(
        model,
        lambda: model(
            hidden_states=latents,
            timestep=torch.zeros(1, device=meta),
            encoder_hidden_states=text,
            encoder_hidden_states_image=image,
            return_dict=False,
        ),
    )
    ref = DenoiserRef(None, FAMILIES["wan"], dict(model.config), {}, torch.float32)  # type: ignore[arg-type]
    formula = wan_working(
        ref, (1, 16, 21, 60, 104)
    ).formula_bytes  # the noise's 16 channels: the sampler's shape
    # Never below what is alive, at most 15% above (measured 1.03x).
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"
