"""Wan end to end: `app --run txt2video.json` on a Wan diffusers folder gives WanPipeline's frames.

The folders are the tiny `demo:tiny-wan` / `demo:tiny-wan22` fixtures (random weights, fixed seeds, a
word-level UMT5-style tokenizer, a Wan VAE that is 4x in space and 2x in time), saved to plain folders and
loaded by path as a user's folder would be. Our side is the CLI: UMT5 through the memory manager, our loop
(`pipelines.diffusion.wan_sampling`), VAE Decode Video and Save Video's PNG frames; theirs is
`WanPipeline.from_pretrained` with the same seed, steps, guidance, size, frames and prompts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from app.main import main
from memory import MemoryManager
from pipelines.diffusion.family_detect import detect_family
from tests.family_support import demo_folder, frames_in, run_workflow

REPO = Path(__file__).resolve().parent.parent
TXT2VIDEO = REPO / "resources/workflows/txt2video.json"
PROMPT = "a small yellow square moving on a black background"
NEGATIVE = "blurry static bad quality"
# 48x32 px = 12x8 latents = 6x4 patches (the pipeline wants sides divisible by 16); 9 frames = 5 latent frames
# with the tiny VAE's 2x in time (Wan's own is 4x: nothing may assume it).
WIDTH, HEIGHT, FRAMES = 48, 32, 9


folder = demo_folder("tiny-wan")


folder22 = demo_folder("tiny-wan22")


def run_cli(
    folder: Path, out: Path, *, cfg: float, steps: int = 4, extra: tuple = (), sets: dict | None = None
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
        "save.format": "png",
        **(sets or {}),
    }
    return run_workflow(TXT2VIDEO, out, values, extra)


def theirs(folder: Path, *, cfg: float, steps: int = 4, euler: bool = False) -> np.ndarray:
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline

    pipe = WanPipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    if euler:  # what `scheduler=euler` means: flow-matching Euler at the folder's flow shift
        config = pipe.scheduler.config
        pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(config, shift=config["flow_shift"])
    video = pipe(
        PROMPT,
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


def assert_same_video(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape == (FRAMES, HEIGHT, WIDTH, 3)
    assert b.std() > 5  # a real video, not a flat one both sides could agree on by accident
    assert not np.array_equal(b[0], b[-1])  # and frames that differ, so frame order is checked too
    # Same ops on the same CPU kernels; 1 of 255 allows a float32 sum order difference at a rounding edge.
    diff = np.abs(a.astype(int) - b.astype(int)).max()
    print(f"wan parity: max uint8 difference {diff}")
    assert diff <= 1


# cfg 5: the conditional and unconditional calls mixed as the pipeline does; cfg 1: no guidance.
@pytest.mark.parametrize("cfg", [5.0, 1.0])
def test_cli_frames_match_wan_pipeline(folder: Path, tmp_path: Path, cfg: float) -> None:
    assert run_cli(folder, tmp_path, cfg=cfg) == 0
    assert_same_video(frames_in(tmp_path), theirs(folder, cfg=cfg))


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_the_euler_scheduler_matches_the_pipeline_with_flow_matching_euler(
    folder: Path, tmp_path: Path
) -> None:
    assert run_cli(folder, tmp_path, cfg=5.0, sets={"sampler.scheduler": "euler"}) == 0
    ours = frames_in(tmp_path)
    assert_same_video(ours, theirs(folder, cfg=5.0, euler=True))
    assert not np.array_equal(ours, theirs(folder, cfg=5.0))  # not UniPC's video: the choice took effect


def test_wan22_experts_match_the_pipeline_and_never_share_memory(folder22: Path, tmp_path: Path) -> None:
    """8 UniPC steps at flow shift 3 put the boundary (0.875 x 1000) after the first steps: both experts
    run. Under sequential offload the high-noise expert leaves before the low-noise one loads."""
    out, report = tmp_path / "out", tmp_path / "report.json"
    extra = ("--offload", "sequential", "--report", str(report))
    assert run_cli(folder22, out, cfg=5.0, steps=8, extra=extra) == 0
    assert_same_video(frames_in(out), theirs(folder22, cfg=5.0, steps=8))

    memory = json.loads(report.read_text())["memory"]
    loads = {e["component"]: e for e in memory["loads"]}
    unloads = {e["component"]: e for e in memory["unloads"]}
    assert loads["transformer"]["kind"] == loads["transformer_2"]["kind"] == "denoiser"
    assert [e["component"] for e in memory["loads"]].count("transformer") == 1
    assert unloads["transformer"]["t"] <= loads["transformer_2"]["t"]


def test_the_shipped_workflow_runs_on_the_tiny_demo_model(tmp_path: Path) -> None:
    args = ["--run", str(TXT2VIDEO), "--out", str(tmp_path), "--quiet", "--set", "save.format=png"]
    assert main(args) == 0
    spec = json.loads(TXT2VIDEO.read_text())["nodes"]
    assert spec["load"]["params"]["path"] == "demo:tiny-wan"
    assert len(frames_in(tmp_path)) == spec["latent"]["params"]["frames"]


def test_prompt_embeddings_equal_the_pipelines_padded_and_truncated(
    folder: Path, cpu_memory: MemoryManager
) -> None:
    """512 positions, the real tokens' states then zeros (the transformer attends to all of them), and a
    prompt longer than 512 tokens cut as the pipeline cuts it."""
    from diffusers import WanPipeline

    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.loading import load_model

    pipe = WanPipeline.from_pretrained(str(folder), dtype=torch.float32)
    long_prompt = " ".join(["red circle"] * 300)  # 600 words + </s>
    mm = cpu_memory
    ref = load_model(mm, str(folder)).text_encoder
    for text in (PROMPT, long_prompt):
        ours = encode_prompt(mm, ref, text).embeds
        expected, _ = pipe.encode_prompt(
            text, do_classifier_free_guidance=False, max_sequence_length=512, device="cpu"
        )  # __call__ passes 512 (encode_prompt alone defaults to 226)
        assert ours.shape == expected.shape == (1, 512, 24)
        # 1e-5: float32 rounding of the same ops (about 1e-6 measured: the attention kernel may pick another
        # summation order); the zero rows must be exactly zero on both sides, checked below.
        torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)
        assert torch.equal(ours == 0, expected == 0)
    short = encode_prompt(mm, ref, PROMPT).embeds[0]
    real = len(PROMPT.split()) + 1  # the words and </s>
    assert short[:real].abs().sum(dim=1).min() > 0 and short[real:].abs().max() == 0


def test_folder_is_detected_as_wan(folder: Path, folder22: Path) -> None:
    assert detect_family(folder) == detect_family(folder22) == "wan"


@pytest.mark.parametrize(
    ("sets", "words"),
    [({"latent.frames": 8}, "'frames'"), ({"latent.width": 44}, "multiples of 8")],
)
def test_sizes_the_model_cannot_make_are_refused(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], sets: dict, words: str
) -> None:
    assert run_cli(folder, tmp_path, cfg=5.0, sets=sets) == 1  # a run failure with one clear line
    err = capsys.readouterr().err
    assert "latent" in err and words in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("width", "height", "frames", "heads", "ffn"),
    [
        (832, 480, 81, 40, 13824),
        (1280, 720, 81, 40, 13824),
        (832, 480, 33, 40, 13824),
        (832, 480, 81, 12, 8960),
    ],
)
def test_working_memory_formula_covers_the_full_size_transformer(
    width: int, height: int, frames: int, heads: int, ffn: int
) -> None:
    """The sampler's reservation against what Wan 2.1 14B's (40 heads) and 1.3B's (12 heads) transformer
    keeps alive for one call at 480p/720p (meta device, tests/live_tensors.py; two blocks are enough, the
    peak is within one), with Wan's own VAE factors (8x in space, 4x in time) and 512 text tokens."""
    from diffusers import WanTransformer3DModel

    from pipelines.diffusion.families import FAMILIES
    from pipelines.diffusion.values import DenoiserRef
    from pipelines.diffusion.wan_sampling import wan_working
    from tests.live_tensors import live_tensor_peak

    meta = torch.device("meta")
    with meta:
        model = WanTransformer3DModel(num_layers=2, num_attention_heads=heads, ffn_dim=ffn, text_dim=4096)
    latents = torch.zeros(1, 16, (frames - 1) // 4 + 1, height // 8, width // 8, device=meta)
    text = torch.zeros(1, 512, 4096, device=meta)
    measured = live_tensor_peak(
        model,
        lambda: model(
            hidden_states=latents,
            timestep=torch.zeros(1, device=meta),
            encoder_hidden_states=text,
            return_dict=False,
        ),
    )
    ref = DenoiserRef(None, FAMILIES["wan"], dict(model.config), {}, torch.float32)  # type: ignore[arg-type]
    formula = wan_working(ref, tuple(latents.shape)).formula_bytes
    # Never below what is alive (a budget would be overrun), at most 15% above (streaming keeps fewer blocks).
    print(f"wan working {width}x{height}x{frames} heads {heads}: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_both_experts_stream_block_by_block_with_the_same_latents(folder22: Path, tmp_path: Path) -> None:
    """In a budget that holds one call's working memory, the weights outside `blocks` and a window of two
    blocks (but not a whole expert of three), `stream` moves each expert's blocks in per call, and the sampled latents are unchanged."""
    from safetensors import safe_open

    from memory import MemoryConfig
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.sampling import SamplerSettings
    from pipelines.diffusion.values import Latents
    from pipelines.diffusion.wan_sampling import sample_wan, wan_working

    shape = (1, 16, 5, HEIGHT // 4, WIDTH // 4)
    settings = SamplerSettings(scheduler="default", steps=8, cfg=5.0, seed=42)

    def run(policy: str, budget: str | None = None) -> tuple[torch.Tensor, list]:
        # Its own data dir: no peak learned by another run replaces the formula the budget is sized on.
        config = MemoryConfig(device="cpu", policy=policy, ram_budget=budget, data_dir=tmp_path / policy)
        with MemoryManager(config) as mm:
            loaded = load_model(mm, str(folder22))
            pos = encode_prompt(mm, loaded.text_encoder, PROMPT)
            neg = encode_prompt(mm, loaded.text_encoder, NEGATIVE)
            out = sample_wan(mm, loaded.denoiser, pos, neg, Latents(torch.zeros(shape), 4), settings)
            return out.samples, mm.report()["transfers"]

    with safe_open(
        str(folder22 / "transformer" / "diffusion_pytorch_model.safetensors"), framework="pt"
    ) as f:
        nbytes = {k: 4 * int(np.prod(f.get_slice(k).get_shape())) for k in f.keys()}  # float32
    block = max(sum(n for k, n in nbytes.items() if k.startswith(f"blocks.{i}.")) for i in range(3))
    fixed = sum(n for k, n in nbytes.items() if not k.startswith("blocks."))
    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp_path / "sizes")) as mm:
        working = wan_working(load_model(mm, str(folder22)).denoiser, shape).formula_bytes
    # 2 KiB of slack for the small tensors the ledger counts beside the weights.
    budget = working + fixed + 2 * block + 2048
    assert budget < working + sum(nbytes.values())  # a whole expert would not fit beside its working memory

    whole, _ = run("none")
    streamed, transfers = run("stream", str(budget))
    streamed_parts = {t["component"] for t in transfers}
    assert {"transformer (streamed)", "transformer_2 (streamed)"} <= streamed_parts
    assert torch.equal(whole, streamed)


@pytest.mark.parametrize("layers", [2, 24])
def test_working_memory_formula_covers_the_full_size_text_encoder(layers: int) -> None:
    """UMT5-XXL's widths (24 layers is Wan's encoder) over the pipeline's 512 padded tokens, on the meta
    device. The attention mask is left out: transformers' mask code reads its values (`.item()`), which meta
    tensors have none of; an all-ones (1, 1, 512, 512) mask would add under 1 MiB."""
    from transformers import UMT5Config, UMT5EncoderModel

    from pipelines.diffusion.wan_text import umt5_working_bytes
    from tests.live_tensors import live_tensor_peak

    config = dict(d_model=4096, d_ff=10240, num_heads=64, d_kv=64, num_layers=layers, vocab_size=256384)
    meta = torch.device("meta")
    with meta:
        model = UMT5EncoderModel(UMT5Config(feed_forward_proj="gated-gelu", **config))
    ids = torch.zeros(1, 512, dtype=torch.long, device=meta)
    measured = live_tensor_peak(model, lambda: model(ids))
    formula = umt5_working_bytes(config, 512, torch.float32)
    print(f"wan text encoder working, {layers} layers: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


@pytest.mark.parametrize(
    ("width", "height", "frames"),
    [
        pytest.param(832, 480, 81, marks=pytest.mark.slow),  # 6 s
        pytest.param(832, 480, 33, marks=pytest.mark.slow),  # 1.5 s
        (480, 480, 9),
    ],
)
def test_working_memory_formula_covers_the_full_size_video_vae(width: int, height: int, frames: int) -> None:
    """Wan 2.1's VAE (the class defaults are its published config) decoding a whole video, on the meta
    device: the reservation covers the live tensors, the output frames included (also 1.026x measured at
    1280x720x17)."""
    from diffusers import AutoencoderKLWan

    from pipelines.diffusion.families import FAMILIES
    from pipelines.diffusion.values import Latents, VaeRef
    from pipelines.diffusion.video_vae import video_vae_working
    from tests.live_tensors import live_tensor_peak

    meta = torch.device("meta")
    with meta:
        vae = AutoencoderKLWan()
    latents = torch.zeros(1, 16, (frames - 1) // 4 + 1, height // 8, width // 8, device=meta)
    measured = live_tensor_peak(vae, lambda: vae.decode(latents, return_dict=False))
    ref = VaeRef(None, FAMILIES["wan"], dict(vae.config), torch.float32)  # type: ignore[arg-type]
    formula = video_vae_working(ref, Latents(latents, 8)).formula_bytes
    print(f"wan vae working {width}x{height}x{frames}: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


def test_the_image_decode_and_image_latent_point_to_the_video_nodes(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Wan model wired like an image model (txt2img.json) fails with one line naming the node to use."""
    args = ["--run", str(REPO / "resources/workflows/txt2img.json"), "--out", str(tmp_path), "--quiet"]
    sets = [f"load.path={folder}", "sampler.scheduler=default", "latent.width=48", "latent.height=32"]
    assert main([*args, *(x for s in sets for x in ("--set", s))]) == 1
    err = capsys.readouterr().err
    assert "Empty Video Latent" in err and "Traceback" not in err
