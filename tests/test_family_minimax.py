"""MiniMax H3 end to end: `app --run txt2video.json` on a MiniMax H3 diffusers folder gives
`MiniMaxH3ModularPipeline`'s frames and stereo sound.

The folder is the tiny `demo:tiny-minimax` fixture (random weights, fixed seeds, a byte-level Qwen tokenizer,
a video VAE that is 8x in space, 8-channel latents, an 8 kHz audio VAE), saved to a plain folder and loaded
by path as a user's folder would be. Our side is the CLI: Qwen3-VL through the memory manager, our loop
(`pipelines.diffusion.minimax_sampling`), VAE Decode Video (frames + the audio VAE) and Save Video; theirs
is the modular pipeline (tests/minimax_reference.py) with the same seed, steps, size and frames. MiniMax H3
was trained on 5 to 15 s at 24 fps (124 frames is the pipeline's shortest; Nodeloom, as ComfyUI, also makes the
shorter 17n + 5 counts); 48x32 px keeps that small.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from memory import MemoryConfig, MemoryManager
from pipelines.diffusion.demo_models import save_demo_model
from pipelines.diffusion.family_detect import detect_family
from tests.family_support import frames_in, run_workflow
from tests.minimax_reference import reference_video

# Every case builds or runs a model: all in the slow lane.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TXT2VIDEO = REPO / "resources/workflows/txt2video.json"
PROMPT = "a small yellow square moving on a black background"
# 48x32 px = 6x4 latents with the tiny 8x VAE (3x2 patches a frame); 124 frames = 37 latent frames, the
# shortest the pipeline makes (5 s at 24 fps, rounded up to 17n + 5). 2 steps = 2 model calls: the
# pipeline's num_inference_steps counts the sigma grid's points, the final 0 included (STEPS + 1).
WIDTH, HEIGHT, FRAMES, STEPS, FPS = 48, 32, 124, 2, 24.0


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_demo_model("tiny-minimax", tmp_path_factory.mktemp("minimax") / "tiny-minimax")


@pytest.fixture(scope="module")
def expected(folder: Path) -> tuple[np.ndarray, torch.Tensor, int]:
    return reference_video(
        folder, prompt=PROMPT, num_inference_steps=STEPS + 1, height=HEIGHT, width=WIDTH, num_frames=FRAMES
    )


def run_cli(folder: Path, out: Path, *, extra: tuple = (), sets: dict | None = None) -> int:
    values = {
        "load.path": str(folder),
        "sampler.scheduler": "default",
        "sampler.steps": STEPS,
        "sampler.cfg": 5.0,  # not used: the checkpoint is guidance-distilled (the pipeline has no scale)
        "sampler.seed": 42,
        "latent.width": WIDTH,
        "latent.height": HEIGHT,
        "latent.frames": FRAMES,
        "positive.text": PROMPT,
        "decode.fps": FPS,
        "save.format": "png",
        **(sets or {}),
    }
    return run_workflow(TXT2VIDEO, out, values, extra)


def assert_same_video(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape == (FRAMES, HEIGHT, WIDTH, 3)
    assert b.std() > 5  # a real video, not a flat one both sides could agree on by accident
    assert not np.array_equal(b[0], b[-1])  # and frames that differ, so frame order is checked too
    # Same ops in the same order on the same CPU kernels (0 measured); 1 of 255 allows a float32 rounding
    # edge where a kernel differs (our conversion rounds, as the reference side's does).
    diff = np.abs(a.astype(int) - b.astype(int)).max()
    print(f"minimax parity: max uint8 difference {diff}")
    assert diff <= 1


def test_cli_frames_match_the_minimax_pipeline(folder: Path, tmp_path: Path, expected) -> None:
    assert run_cli(folder, tmp_path) == 0
    assert_same_video(frames_in(tmp_path), expected[0])


def test_the_sound_track_is_the_pipelines(folder: Path, tmp_path: Path, expected) -> None:
    """The VIDEO's stereo audio equals the pipeline's waveform (VAE Decode Video through the API)."""
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.minimax_vae import decode_minimax, empty_minimax_latent
    from pipelines.diffusion.sampling import SamplerSettings

    _, wave, rate = expected
    config = MemoryConfig(device="cpu", policy="none", data_dir=tmp_path / "mm")
    with MemoryManager(config) as mm:
        loaded = load_model(mm, str(folder))
        positive = encode_prompt(mm, loaded.text_encoder, PROMPT)
        empty = empty_minimax_latent(loaded.vae, loaded.denoiser, WIDTH, HEIGHT, FRAMES)
        settings = SamplerSettings(scheduler="default", steps=STEPS, seed=42)
        video = decode_minimax(
            mm, loaded.vae, sample(mm, loaded.denoiser, positive, None, empty, settings), FPS
        )
    assert video.audio is not None and video.audio.sample_rate == rate == 8000  # the tiny audio VAE's rate
    assert video.audio.waveform.shape == wave.shape and wave.shape[0] == 2 and wave.abs().max() > 1e-3
    # float32 rounding of the same ops (0 measured); the clip to [-1, 1] is ours (the VIDEO value's range).
    torch.testing.assert_close(video.audio.waveform, wave.clamp(-1, 1), rtol=0, atol=1e-5)


def test_seed_changes_the_video_and_cfg_does_not(folder: Path, tmp_path: Path, expected) -> None:
    """Guidance-distilled: the pipeline has no guidance scale and no negative prompt, so neither changes a
    frame (cfg 1 and another negative still give the pipeline's video); the seed does."""
    assert run_cli(folder, tmp_path / "b", sets={"sampler.cfg": 1.0, "negative.text": "red"}) == 0
    assert run_cli(folder, tmp_path / "c", sets={"sampler.seed": 7}) == 0
    assert_same_video(frames_in(tmp_path / "b"), expected[0])
    assert not np.array_equal(frames_in(tmp_path / "c"), expected[0])


def test_stream_in_a_small_budget_gives_the_same_frames(folder: Path, tmp_path: Path, expected) -> None:
    report = tmp_path / "report.json"
    extra = ("--offload", "stream", "--ram-budget", "2GiB", "--report", str(report))
    assert run_cli(folder, tmp_path / "stream", extra=extra) == 0
    assert json.loads(report.read_text())["memory"]["policy"] == "stream"
    # `none` gives the pipeline's frames exactly (0 measured, test_cli_frames_match_the_minimax_pipeline);
    # streaming moves the same weights, so the frames are those, bit for bit.
    assert np.array_equal(frames_in(tmp_path / "stream"), frames_in_none(folder, tmp_path / "none"))


def frames_in_none(folder: Path, out: Path) -> np.ndarray:
    assert run_cli(folder, out, extra=("--offload", "none")) == 0
    return frames_in(out)


def test_folder_is_detected_as_minimax(folder: Path) -> None:
    assert detect_family(folder) == "minimax"


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"latent.frames": 3601}, "field 'frames': MiniMax H3 takes 1 to 3600 frames"),
        ({"latent.width": 40}, "must be multiples of 16 for MiniMax H3"),
        ({"sampler.scheduler": "dpmpp_2m"}, "scheduler default or euler"),
    ],
)
def test_bad_settings_fail_the_run_with_one_line_naming_the_field(
    folder: Path, tmp_path: Path, capsys, sets, message
) -> None:
    assert run_cli(folder, tmp_path, sets=sets) == 1  # the node refuses when it runs: a failed run
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("run failed:")]  # one line, unwrapped
    assert message in line and "Traceback" not in err


def test_the_transformer_streams_block_by_block_with_the_same_latents(folder: Path, tmp_path: Path) -> None:
    """In a budget that holds one call's working memory, the weights outside `transformer_blocks` and a
    window of two blocks (not all three), `stream` moves the blocks in per call; the latents are unchanged."""
    from safetensors import safe_open

    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.minimax_sampling import minimax_working, sample_minimax
    from pipelines.diffusion.minimax_vae import empty_minimax_latent
    from pipelines.diffusion.sampling import SamplerSettings

    settings = SamplerSettings(scheduler="default", steps=STEPS, seed=42)

    def run(policy: str, budget: str | None = None) -> tuple[torch.Tensor, torch.Tensor, list, int]:
        config = MemoryConfig(device="cpu", policy=policy, ram_budget=budget, data_dir=tmp_path / policy)
        with MemoryManager(config) as mm:
            loaded = load_model(mm, str(folder))
            positive = encode_prompt(mm, loaded.text_encoder, PROMPT)
            empty = empty_minimax_latent(loaded.vae, loaded.denoiser, WIDTH, HEIGHT, FRAMES)
            out = sample_minimax(mm, loaded.denoiser, positive, None, empty, settings)
            rows = positive.embeds.shape[1] + 37 * 3 * 2 + 2 * empty.audio.shape[-1]  # text, video, audio
            working = minimax_working(loaded.denoiser, rows).formula_bytes
            return out.samples, out.audio, mm.report()["transfers"], working

    with safe_open(str(folder / "transformer" / "diffusion_pytorch_model.safetensors"), framework="pt") as f:
        nbytes = {k: 4 * int(np.prod(f.get_slice(k).get_shape())) for k in f.keys()}  # float32
    block = max(
        sum(n for k, n in nbytes.items() if k.startswith(f"transformer_blocks.{i}.")) for i in range(3)
    )
    fixed = sum(n for k, n in nbytes.items() if not k.startswith("transformer_blocks."))
    whole, whole_audio, _, working = run("none")
    budget = working + fixed + 2 * block + 2048  # 2 KiB of slack for the small tensors beside the weights
    assert budget < working + sum(nbytes.values())  # the whole transformer would not fit beside its working
    streamed, streamed_audio, transfers, _ = run("stream", str(budget))
    assert "transformer (streamed)" in {t["component"] for t in transfers}
    assert torch.equal(whole, streamed) and torch.equal(whole_audio, streamed_audio)


def test_a_modular_pipeline_folder_loads_and_runs(folder: Path, tmp_path: Path, expected) -> None:
    """A folder as `ModularPipeline.save_pretrained` writes it (`modular_model_index.json`, no
    `model_index.json`) is detected and runs the same frames."""
    import shutil

    modular = tmp_path / "modular"
    shutil.copytree(folder, modular)
    index = json.loads((modular / "model_index.json").read_text())
    (modular / "model_index.json").unlink()
    index["_blocks_class_name"] = "MiniMaxH3Blocks"
    (modular / "modular_model_index.json").write_text(json.dumps(index))
    assert detect_family(modular) == "minimax"
    assert run_cli(modular, tmp_path / "a") == 0
    assert_same_video(frames_in(tmp_path / "a"), expected[0])


@pytest.mark.parametrize("workflow", ["txt2video.json", "img2video_minimax.json"])
def test_app_plan_reads_the_minimax_workflows(folder: Path, capsys, workflow: str) -> None:
    """`app plan` (configs and headers only, no run) takes a MiniMax H3 folder: the transformer's (t, h, w)
    patch is read as its side."""
    from app.main import main

    args = ["plan", str(REPO / "resources/workflows" / workflow), "--set", f"load.path={folder}"]
    assert main(args) == 0
    assert "stream     fits" in capsys.readouterr().out


@pytest.mark.parametrize("frames", [22, 56])  # 1 s, and the templates' 2 s default
def test_shorter_videos_than_the_pipelines_5_s_are_its_frames_with_the_duration_check_relaxed(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frames: int
) -> None:
    """ComfyUI makes any 17n + 5 frames; diffusers' pipeline refuses under 5 s by a property of its own
    (`min_duration`), not by what its VAE or transformer can do: relaxed, it gives the CLI's frames."""
    from diffusers.modular_pipelines.minimax_h3.modular_pipeline import MiniMaxH3ModularPipeline

    monkeypatch.setattr(MiniMaxH3ModularPipeline, "min_duration", property(lambda self: 0.0))
    expected, _, _ = reference_video(
        folder, prompt=PROMPT, num_inference_steps=STEPS + 1, height=HEIGHT, width=WIDTH, num_frames=frames
    )
    assert run_cli(folder, tmp_path, sets={"latent.frames": frames}) == 0
    ours = frames_in(tmp_path)
    assert ours.shape == expected.shape == (frames, HEIGHT, WIDTH, 3) and expected.std() > 5
    # the same ops on the same CPU kernels as the 124-frame parity above (0 measured there)
    assert np.abs(ours.astype(int) - expected.astype(int)).max() <= 1


def test_the_shortest_video_comfyui_makes_is_five_frames_with_sound(folder: Path, tmp_path: Path) -> None:
    """5 frames (2 latent frames): diffusers' video decode returns nothing for them (no full chunk), so the
    pipeline cannot be the reference; ComfyUI decodes them by padding one chunk of the last latent frame and
    keeping the first 5 frames, and so does ours. The latent carries round(5 / 24 x 40) = 8 audio latents."""
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.minimax_vae import empty_minimax_latent

    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp_path / "mm")) as mm:
        loaded = load_model(mm, str(folder))
        empty = empty_minimax_latent(loaded.vae, loaded.denoiser, WIDTH, HEIGHT, 1)  # snapped up to 5
    assert empty.samples.shape[2] == 2 and empty.audio is not None and empty.audio.shape[-1] == 8
    assert run_cli(folder, tmp_path / "out", sets={"latent.frames": 5}) == 0
    frames = frames_in(tmp_path / "out")
    assert frames.shape == (5, HEIGHT, WIDTH, 3) and frames.std() > 5
    assert not np.array_equal(frames[0], frames[-1])
