"""LTX-2 end to end: `app --run txt2video.json` on an LTX-2 diffusers folder gives LTX2Pipeline's frames and
sound.

The folder is the tiny `demo:tiny-ltx2` fixture (random weights, fixed seeds, a character-level Gemma
tokenizer, a video VAE that is 4x in space and time), saved to a plain folder and loaded by path as a user's
folder would be. Our side is the CLI: Gemma 3 and the connectors through the memory manager, our loop
(`pipelines.diffusion.ltx2_sampling`), VAE Decode Video (frames + the audio VAE and vocoder) and Save Video;
theirs is `LTX2Pipeline.from_pretrained` with the same seed, steps, guidance, size, frames, frame rate and
prompts (every other guidance scale at the pipeline's default).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.main import main
from memory import MemoryConfig, MemoryManager
from pipelines.diffusion.family_detect import detect_family
from tests.demo_support import copy_demo_model
from tests.family_support import frames_in, run_workflow

# Every case builds or runs a model (the fixture alone takes about a second): all in the slow lane.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TXT2VIDEO = REPO / "resources/workflows/txt2video.json"
PROMPT = "a small yellow square moving on a black background"
NEGATIVE = "blurry static bad quality"
# The pipeline wants sides divisible by 32: 64x32 px = 16x8 latents with the tiny 4x VAE; 9 frames = 3
# latent frames (4x in time: LTX-2's own is 8x, nothing may assume it); 24 fps is the pipeline's default.
WIDTH, HEIGHT, FRAMES, FPS = 64, 32, 9, 24.0


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_demo_model("tiny-ltx2", tmp_path_factory.mktemp("ltx2") / "tiny-ltx2")


def run_cli(
    folder: Path, out: Path, *, cfg: float = 3.0, steps: int = 4, extra: tuple = (), sets: dict | None = None
) -> int:
    values = {
        "load.path": str(folder),
        "sampler.scheduler": "default",
        "sampler.steps": steps,
        "sampler.cfg": cfg,
        "sampler.seed": 42,
        "latent.width": WIDTH,
        "latent.height": HEIGHT,
        "latent.frames": FRAMES,
        "positive.text": PROMPT,
        "negative.text": NEGATIVE,
        "decode.fps": FPS,
        "save.format": "png",
        **(sets or {}),
    }
    return run_workflow(TXT2VIDEO, out, values, extra)


def pipeline_output(folder: Path, *, cfg: float, steps: int = 4) -> tuple[np.ndarray, torch.Tensor]:
    from diffusers import LTX2Pipeline

    pipe = LTX2Pipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(
        PROMPT,
        negative_prompt=NEGATIVE,
        height=HEIGHT,
        width=WIDTH,
        num_frames=FRAMES,
        frame_rate=FPS,
        num_inference_steps=steps,
        guidance_scale=cfg,
        generator=torch.Generator("cpu").manual_seed(42),
        output_type="np",
    )
    return (out.frames[0] * 255).round().astype(np.uint8), out.audio[0].float()


def assert_same_video(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape == (FRAMES, HEIGHT, WIDTH, 3)
    assert b.std() > 5  # a real video, not a flat one both sides could agree on by accident
    assert not np.array_equal(b[0], b[-1])  # and frames that differ, so frame order is checked too
    # Same ops in the same order on the same CPU kernels (0 measured); 1 of 255 allows a float32 sum-order
    # difference at a rounding edge (the connectors run per prompt here, on a [neg, pos] batch there).
    diff = np.abs(a.astype(int) - b.astype(int)).max()
    print(f"ltx2 parity: max uint8 difference {diff}")
    assert diff <= 1


# cfg 3 (the pipeline's default); cfg 1: no video CFG term, the audio stream still guided at 7 on both sides.
@pytest.mark.parametrize("cfg", [3.0, 1.0])
def test_cli_frames_match_ltx2_pipeline(folder: Path, tmp_path: Path, cfg: float) -> None:
    assert run_cli(folder, tmp_path, cfg=cfg) == 0
    assert_same_video(frames_in(tmp_path), pipeline_output(folder, cfg=cfg)[0])


def test_guidance_and_seed_change_the_video(folder: Path, tmp_path: Path) -> None:
    assert run_cli(folder, tmp_path / "a") == 0
    assert run_cli(folder, tmp_path / "b", cfg=6.0) == 0
    assert run_cli(folder, tmp_path / "c", sets={"sampler.seed": 7}) == 0
    a, b, c = (frames_in(tmp_path / n) for n in "abc")
    assert not np.array_equal(a, b) and not np.array_equal(a, c)


def test_the_sound_track_is_the_pipelines_and_lands_in_the_mp4(folder: Path, tmp_path: Path) -> None:
    """The VIDEO's audio equals the pipeline's waveform, and Save Video writes it as an AAC stream."""
    import av

    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.ltx2_nodes import decode_ltx2, empty_ltx2_latent
    from pipelines.diffusion.sampling import SamplerSettings

    _, expected = pipeline_output(folder, cfg=3.0)
    config = MemoryConfig(device="cpu", policy="none", data_dir=tmp_path / "mm")
    with MemoryManager(config) as mm:
        loaded = load_model(mm, str(folder))
        pos = encode_prompt(mm, loaded.text_encoder, PROMPT)
        neg = encode_prompt(mm, loaded.text_encoder, NEGATIVE)
        empty = empty_ltx2_latent(loaded.vae, loaded.denoiser, WIDTH, HEIGHT, FRAMES, FPS)
        settings = SamplerSettings(scheduler="default", steps=4, cfg=3.0, seed=42)
        video = decode_ltx2(mm, loaded.vae, sample(mm, loaded.denoiser, pos, neg, empty, settings), FPS)
    assert video.audio is not None and video.audio.sample_rate == 16000  # the vocoder's output rate
    assert video.audio.waveform.shape == expected.shape and expected.abs().max() > 0.01
    # float32 rounding of the same ops (0 measured); the clip to [-1, 1] is ours (the VIDEO value's range).
    torch.testing.assert_close(video.audio.waveform, expected.clamp(-1, 1), rtol=0, atol=1e-5)

    assert run_cli(folder, tmp_path / "mp4", sets={"save.format": "mp4"}) == 0
    (path,) = (tmp_path / "mp4").iterdir()
    with av.open(str(path)) as container:
        (stream,) = container.streams.audio
        assert stream.codec_context.name == "aac" and stream.channels == expected.shape[0]
        samples = sum(frame.samples for frame in container.decode(stream))
    assert abs(samples - expected.shape[1]) <= 2048  # AAC pads to whole 1024-sample frames (and priming)


def test_sequential_offload_gives_the_same_frames(folder: Path, tmp_path: Path) -> None:
    assert run_cli(folder, tmp_path / "none", extra=("--offload", "none")) == 0
    report = tmp_path / "report.json"
    assert run_cli(folder, tmp_path / "seq", extra=("--offload", "sequential", "--report", str(report))) == 0
    assert np.array_equal(frames_in(tmp_path / "none"), frames_in(tmp_path / "seq"))
    unloaded = {e["component"] for e in json.loads(report.read_text())["memory"]["unloads"]}
    assert {"text_encoder", "connectors", "transformer"} <= unloaded  # each left before the next one ran


def test_the_transformer_streams_block_by_block_with_the_same_latents(folder: Path, tmp_path: Path) -> None:
    """In a budget that holds one call's working memory, the weights outside `transformer_blocks` and a
    window of two blocks (not all three), `stream` moves the blocks in per call; the latents are unchanged."""
    from safetensors import safe_open

    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.ltx2_nodes import empty_ltx2_latent
    from pipelines.diffusion.ltx2_sampling import ltx2_working, sample_ltx2
    from pipelines.diffusion.sampling import SamplerSettings

    settings = SamplerSettings(scheduler="default", steps=3, cfg=3.0, seed=42)

    def run(policy: str, budget: str | None = None) -> tuple[torch.Tensor, torch.Tensor, list]:
        config = MemoryConfig(device="cpu", policy=policy, ram_budget=budget, data_dir=tmp_path / policy)
        with MemoryManager(config) as mm:
            loaded = load_model(mm, str(folder))
            pos = encode_prompt(mm, loaded.text_encoder, PROMPT)
            neg = encode_prompt(mm, loaded.text_encoder, NEGATIVE)
            empty = empty_ltx2_latent(loaded.vae, loaded.denoiser, WIDTH, HEIGHT, FRAMES, FPS)
            out = sample_ltx2(mm, loaded.denoiser, pos, neg, empty, settings)
            return out.samples, out.audio, mm.report()["transfers"]

    with safe_open(str(folder / "transformer" / "diffusion_pytorch_model.safetensors"), framework="pt") as f:
        nbytes = {k: 4 * int(np.prod(f.get_slice(k).get_shape())) for k in f.keys()}  # float32
    block = max(
        sum(n for k, n in nbytes.items() if k.startswith(f"transformer_blocks.{i}.")) for i in range(3)
    )
    fixed = sum(n for k, n in nbytes.items() if not k.startswith("transformer_blocks."))
    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp_path / "sizes")) as mm:
        denoiser = load_model(mm, str(folder)).denoiser
    video_tokens = (FRAMES // 4 + 1) * (HEIGHT // 4) * (WIDTH // 4)
    working = ltx2_working(denoiser, video_tokens, 4, 1024).formula_bytes
    budget = working + fixed + 2 * block + 2048  # 2 KiB of slack for the small tensors beside the weights
    assert budget < working + sum(nbytes.values())  # the whole transformer would not fit beside its working

    whole, whole_audio, _ = run("none")
    streamed, streamed_audio, transfers = run("stream", str(budget))
    assert "transformer (streamed)" in {t["component"] for t in transfers}
    assert torch.equal(whole, streamed) and torch.equal(whole_audio, streamed_audio)


def test_folder_is_detected_as_ltx2(folder: Path) -> None:
    assert detect_family(folder) == "ltx2"


@pytest.mark.parametrize(
    ("sets", "words"),
    [({"latent.frames": 8}, "'frames'"), ({"latent.width": 48}, "multiples of 32")],
)
def test_sizes_the_model_cannot_make_are_refused(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], sets: dict, words: str
) -> None:
    assert run_cli(folder, tmp_path, sets=sets) == 1  # a run failure with one clear line
    err = capsys.readouterr().err
    assert "latent" in err and words in err and "Traceback" not in err


IMG2VIDEO = REPO / "resources/workflows/img2video_ltx2.json"


def i2v_pipeline_frames(folder: Path, picture: Path, *, crf: int | None) -> np.ndarray:
    from diffusers import LTX2ImageToVideoPipeline

    pipe = LTX2ImageToVideoPipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(
        image=Image.open(picture).convert("RGB"),
        image_crf=crf,  # None: the pipeline's default for Gemma 3 folders (33)
        prompt=PROMPT,
        negative_prompt=NEGATIVE,
        height=HEIGHT,
        width=WIDTH,
        num_frames=FRAMES,
        frame_rate=FPS,
        num_inference_steps=4,
        guidance_scale=3.0,
        generator=torch.Generator("cpu").manual_seed(42),
        output_type="np",
    )
    return (out.frames[0] * 255).round().astype(np.uint8)


# crf 33: the picture re-compressed with H.264 first, as the pipeline does by default; 0: as it is. The
# 64x64 picture is resized to 64x32 on both sides (bilinear, the pipeline's VideoProcessor).
@pytest.mark.parametrize("crf", [33, 0])
def test_image_to_video_matches_the_i2v_pipeline(folder: Path, tmp_path: Path, crf: int) -> None:
    from pipelines.paths import builtin_image_path

    spec = json.loads(IMG2VIDEO.read_text())["nodes"]
    assert spec["load"]["params"]["path"] == "demo:tiny-ltx2"
    picture = builtin_image_path(spec["image"]["params"]["path"])
    args = ["--run", str(IMG2VIDEO), "--out", str(tmp_path), "--quiet", "--device", "cpu"]
    sets = {
        "load.path": folder,
        "positive.text": PROMPT,
        "negative.text": NEGATIVE,
        "latent.width": WIDTH,
        "latent.height": HEIGHT,
        "latent.frames": FRAMES,
        "latent.crf": crf,
        "save.format": "png",
    }
    assert main([*args, *(x for k, v in sets.items() for x in ("--set", f"{k}={v}"))]) == 0
    ours = frames_in(tmp_path)
    assert_same_video(ours, i2v_pipeline_frames(folder, picture, crf=crf if crf else 0))
    assert run_cli(folder, tmp_path / "t2v") == 0
    assert not np.array_equal(ours, frames_in(tmp_path / "t2v"))  # the picture took effect


def test_the_shipped_image_to_video_workflow_runs_with_sound(tmp_path: Path) -> None:
    import av

    assert main(["--run", str(IMG2VIDEO), "--out", str(tmp_path), "--quiet"]) == 0
    (path,) = tmp_path.iterdir()
    with av.open(str(path)) as container:
        assert len(container.streams.audio) == 1
        video = container.streams.video[0]
        frames = sum(1 for _ in container.decode(video))
    assert frames == json.loads(IMG2VIDEO.read_text())["nodes"]["latent"]["params"]["frames"]


def test_transformer_weights_are_recognised_and_single_files_refused(folder: Path) -> None:
    from safetensors import safe_open

    from pipelines.diffusion.families import UnsupportedModelError, detect_single_file_family
    from pipelines.diffusion.family_detect import family_from_keys

    with safe_open(str(folder / "transformer" / "diffusion_pytorch_model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
    assert family_from_keys(keys, {}) == "ltx2"
    # The key diffusers' own single-file loader recognises an original LTX-2 checkpoint by.
    original = ["model.diffusion_model.av_ca_a2v_gate_adaln_single.emb.timestep_embedder.linear_1.weight"]
    with pytest.raises(UnsupportedModelError, match="LTX-2"):
        detect_single_file_family(original)


def test_the_frame_rate_sizes_the_sound_and_conditions_the_video(folder: Path, tmp_path: Path) -> None:
    """Empty LTXV Latent Video at 12 fps: half the audio latents of 24 fps for the same frames, and the
    pipeline's frames at `frame_rate=12` (the rate also conditions the transformer's positions)."""
    from diffusers import LTX2Pipeline

    data = json.loads(TXT2VIDEO.read_text())
    latent = {"vae": ["load", "vae"], "denoiser": ["load", "denoiser"]}
    data["nodes"]["latent"] = {"type": "EmptyLTXVLatentVideo", "params": {"fps": 12.0}, "inputs": latent}
    workflow = tmp_path / "ltxv.json"
    workflow.write_text(json.dumps(data))
    args = ["--run", str(workflow), "--out", str(tmp_path / "out"), "--quiet", "--device", "cpu"]
    sets = {
        "load.path": folder,
        "positive.text": PROMPT,
        "negative.text": NEGATIVE,
        "latent.width": WIDTH,
        "latent.height": HEIGHT,
        "latent.frames": FRAMES,
        "sampler.cfg": 3.0,
        "decode.fps": 12.0,
        "save.format": "png",
    }
    assert main([*args, *(x for k, v in sets.items() for x in ("--set", f"{k}={v}"))]) == 0

    pipe = LTX2Pipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES, guidance_scale=3.0)
    out = pipe(
        PROMPT,
        frame_rate=12.0,
        num_inference_steps=4,
        generator=torch.Generator("cpu").manual_seed(42),
        output_type="np",
        **kwargs,
    )
    assert_same_video(frames_in(tmp_path / "out"), (out.frames[0] * 255).round().astype(np.uint8))

    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.ltx2_nodes import empty_ltx2_latent

    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp_path / "mm")) as mm:
        vae = load_model(mm, str(folder)).vae
        slow, fast = (empty_ltx2_latent(vae, None, WIDTH, HEIGHT, 97, fps).audio for fps in (12.0, 24.0))
    assert slow.shape[2] == 2 * fast.shape[2]  # 97 frames at 12 fps last twice as long


def test_a_step_cache_is_refused_with_a_message(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(folder, tmp_path, sets={"sampler.cache": "first-block"}) == 1
    err = capsys.readouterr().err
    assert "cache" in err and "LTX-2" in err and "Traceback" not in err
