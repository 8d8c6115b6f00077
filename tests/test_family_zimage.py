"""Z-Image end to end: `app --run txt2img.json` on a Z-Image diffusers folder gives ZImagePipeline's picture.

The folder is the tiny `demo:tiny-zimage` fixture (random weights, fixed seeds, its own byte-level BPE
tokenizer and chat template), saved to a plain folder and loaded by path as a user's folder would be. Our
side is the CLI: the folder tokenizer's chat template, Qwen3 through the memory manager, our own loop
(`pipelines.diffusion.zimage_sampling`) and the VAE decode; theirs is `ZImagePipeline.from_pretrained` with
the same seed, steps, guidance, size and prompts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.main import main
from pipelines.diffusion.families import FAMILIES, UnsupportedModelError, detect_single_file_family
from pipelines.diffusion.family_detect import detect_family, family_from_keys, family_from_text_encoders
from tests.family_support import REPO, TXT2IMG, Txt2Img, assert_same_picture, block_sizes, demo_folder

PROMPT = "a small yellow triangle on a black background"
NEGATIVE = "blurry bad quality"
# Odd on purpose: 40 / (4 px per latent x 2x2 patches) = 5 patches across, so nothing assumes square or even.
WIDTH, HEIGHT = 40, 56


folder = demo_folder("tiny-zimage")
ours = Txt2Img(PROMPT, NEGATIVE, WIDTH, HEIGHT)


def theirs(folder: Path, *, cfg: float, steps: int = 3, seed: int = 42) -> np.ndarray:
    from diffusers import ZImagePipeline

    pipe = ZImagePipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    image = pipe(
        PROMPT,
        negative_prompt=NEGATIVE,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=steps,
        guidance_scale=cfg,
        generator=torch.Generator("cpu").manual_seed(seed),
    ).images[0]
    return np.asarray(image.convert("RGB"))


# cfg 3: the pipeline's `pos + g * (pos - neg)` on a doubled batch; cfg 0: its "no guidance" (the negative
# prompt is encoded but unused).
@pytest.mark.parametrize("cfg", [3.0, 0.0])
def test_cli_picture_matches_zimage_pipeline(folder: Path, tmp_path: Path, cfg: float) -> None:
    a, b = ours(folder, tmp_path, cfg=cfg), theirs(folder, cfg=cfg)
    assert_same_picture(a, b, (HEIGHT, WIDTH, 3), "zimage parity")


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_image_to_image_matches_the_img2img_pipeline(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """denoise 0.6 = the img2img pipeline's strength 0.6: the last part of the schedule from the encoded
    picture mixed with noise. Its VAE encode samples the latent distribution with the seed's generator; ours
    (VAE Encode) takes the mode, so theirs is made to take the mode too and the noise draws line up."""
    from diffusers import ZImageImg2ImgPipeline
    from diffusers.pipelines.z_image import pipeline_z_image_img2img

    ramp = np.linspace(0, 255, HEIGHT * WIDTH * 3).reshape(HEIGHT, WIDTH, 3)
    picture = tmp_path / "in.png"
    Image.fromarray(ramp.astype(np.uint8)).save(picture)
    sets = [f"load.path={folder}", f"image.path={picture}", "sampler.scheduler=default", "sampler.steps=5"]
    sets += ["sampler.cfg=3.0", "sampler.denoise=0.6", f"positive.text={PROMPT}", f"negative.text={NEGATIVE}"]
    args = [
        "--run",
        str(REPO / "resources/workflows/img2img.json"),
        "--out",
        str(tmp_path / "out"),
        "--quiet",
    ]
    assert main([*args, *(x for s in sets for x in ("--set", s))]) == 0
    (png,) = sorted((tmp_path / "out").glob("*.png"))
    a = np.asarray(Image.open(png).convert("RGB"))

    monkeypatch.setattr(
        pipeline_z_image_img2img, "retrieve_latents", lambda out, generator=None: out.latent_dist.mode()
    )
    pipe = ZImageImg2ImgPipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    b = pipe(
        PROMPT,
        image=Image.open(picture),
        strength=0.6,
        negative_prompt=NEGATIVE,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=5,
        guidance_scale=3.0,
        generator=torch.Generator("cpu").manual_seed(42),
    ).images[0]
    b = np.asarray(b.convert("RGB"))
    assert a.shape == b.shape == (HEIGHT, WIDTH, 3)
    # As above: 1 of 255 for a float32 rounding edge.
    diff = np.abs(a.astype(int) - b.astype(int)).max()
    print(f"zimage parity: max uint8 difference {diff}")
    assert diff <= 1


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_guidance_and_seed_change_the_picture(folder: Path, tmp_path: Path) -> None:
    ours.assert_guidance_and_seed_matter(folder, tmp_path, cfg=3.0, off=0.0)


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_stream_offload_gives_the_same_picture(folder: Path, tmp_path: Path) -> None:
    ours.assert_stream_is_none(folder, tmp_path, cfg=3.0)


def test_sizes_the_patches_cannot_cut_are_refused(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--run", str(TXT2IMG), "--out", str(tmp_path), "--quiet", "--set", f"load.path={folder}"]
    args += ["--set", "sampler.scheduler=default", "--set", "sampler.steps=1", "--set", "latent.width=44"]
    assert main(args) == 1  # a run failure with one clear line, not a traceback
    err = capsys.readouterr().err
    assert "Z-Image cuts the latents into 2x2 patches" in err and "multiples of 8" in err
    assert "Traceback" not in err


def test_folder_and_headers_are_detected_as_zimage(folder: Path) -> None:
    assert detect_family(folder) == "zimage"
    assert detect_family(folder / "transformer" / "diffusion_pytorch_model.safetensors") == "zimage"
    original = ["noise_refiner.0.attention.qkv.weight", "context_refiner.0.attention.qkv.weight"]
    assert family_from_keys(original, {}) == "zimage"
    with pytest.raises(UnsupportedModelError, match="Z-Image"):
        detect_single_file_family(original)
    # Separate CLIP/T5 files never stand for Z-Image's Qwen3 (no files at all name no family either).
    assert family_from_text_encoders(0, 0) is None


def test_declared_blocks_let_stream_hold_the_full_size_models_in_a_small_budget() -> None:
    """Z-Image-Turbo's transformer (the class defaults are its published config) and text encoder, on the
    meta device: streaming keeps the weights outside the declared blocks plus a window of the largest block,
    so both must be a small part of the ~6B and ~4B parameters."""
    from diffusers import ZImageTransformer2DModel

    with torch.device("meta"):
        model = ZImageTransformer2DModel()
    blocks, total, sizes = block_sizes(model, FAMILIES["zimage"].denoiser_blocks)
    fixed = total - sum(sizes)
    assert len(blocks) == 2 + 2 + 30  # noise refiners, context refiners, main layers
    assert max(sizes) < 0.04 * total and fixed < 0.02 * total

    # Its Qwen3-4B text encoder: the embedding table (151936 x 2560) stays outside the layers.
    from transformers import Qwen3Config, Qwen3Model

    from pipelines.diffusion.working import QWEN3_4B

    with torch.device("meta"):
        encoder = Qwen3Model(Qwen3Config(vocab_size=151936, **QWEN3_4B))
    blocks, total, sizes = block_sizes(encoder, FAMILIES["zimage"].text_encoders[0].blocks)
    assert len(blocks) == 36
    assert max(sizes) < 0.03 * total and total - sum(sizes) < 0.11 * total


@pytest.mark.parametrize(
    ("height", "width", "caption", "guidance"),
    [(1024, 1024, 512, True), (1024, 1024, 77, False), (768, 512, 100, True), (1536, 1024, 300, False)],
)
def test_working_memory_formula_covers_the_full_size_transformer(
    height: int, width: int, caption: int, guidance: bool
) -> None:
    """The sampler's reservation against what Z-Image-Turbo's transformer keeps alive (meta device, measured
    with tests/live_tensors.py; two main layers are enough, the peak is within one)."""
    from diffusers import ZImageTransformer2DModel

    from pipelines.diffusion.sampling import denoiser_working_bytes
    from pipelines.diffusion.values import Conditioning, DenoiserRef
    from pipelines.diffusion.zimage_sampling import caption_tokens
    from tests.live_tensors import live_tensor_peak

    meta = torch.device("meta")
    with meta:
        model = ZImageTransformer2DModel(n_layers=2)
    rows = 2 if guidance else 1
    latents = [torch.zeros(16, 1, height // 8, width // 8, device=meta) for _ in range(rows)]
    captions = [torch.zeros(caption, 2560, device=meta) for _ in range(rows)]
    measured = live_tensor_peak(
        model, lambda: model(latents, torch.zeros(rows, device=meta), captions, return_dict=False)
    )
    cond = Conditioning(embeds=torch.zeros(1, caption, 1), family="zimage")
    ref = DenoiserRef(None, FAMILIES["zimage"], dict(model.config), {}, torch.float32)  # type: ignore[arg-type]
    formula = denoiser_working_bytes(ref, height, width, 1, guidance, caption_tokens(cond, None))
    # Never below what is alive (a budget would be overrun), at most 15% above (streaming keeps fewer blocks).
    print(f"zimage working {height}x{width} caption {caption} cfg {guidance}: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


@pytest.mark.parametrize("layers", [4, 36])
def test_working_memory_formula_covers_the_full_size_text_encoder(layers: int) -> None:
    """Qwen3-4B's widths (36 layers is the published depth) over the pipeline's 512 padded tokens, on the
    meta device. The attention mask is left out: transformers' mask code reads its values (`.item()`), which
    meta tensors have none of, and a causal-only mask keeps the same activations alive."""
    from transformers import Qwen3Config, Qwen3Model

    from pipelines.diffusion.working import QWEN3_4B, chat_encoder_working_bytes
    from tests.live_tensors import live_tensor_peak

    config = {**QWEN3_4B, "num_hidden_layers": layers}
    meta = torch.device("meta")
    with meta:
        model = Qwen3Model(Qwen3Config(vocab_size=151936, attn_implementation="sdpa", **config))
    ids = torch.zeros(1, 512, dtype=torch.long, device=meta)
    measured = live_tensor_peak(model, lambda: model(input_ids=ids, output_hidden_states=True))
    formula = chat_encoder_working_bytes(config, 512, torch.float32)
    print(f"zimage text encoder working, {layers} layers: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_the_text_encoder_streams_layer_by_layer_with_the_same_embeddings(folder: Path) -> None:
    """Z-Image's text encoder (4B parameters at full size) declares its layers: in a budget that holds its
    working memory, the weights outside the layers and one layer, `stream` moves the rest in per call and
    the prompt's embeddings are unchanged."""
    import json

    from safetensors import safe_open

    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.working import chat_encoder_working_bytes

    def embeds(policy: str, budget: str | None = None) -> tuple[torch.Tensor, list]:
        with MemoryManager(MemoryConfig(device="cpu", policy=policy, ram_budget=budget)) as mm:
            cond = encode_prompt(mm, load_model(mm, folder).text_encoder, PROMPT)
            return cond.embeds, mm.report()["transfers"]

    weights = folder / "text_encoder" / "model.safetensors"
    with safe_open(str(weights), framework="pt") as f:
        sizes = {k: f.get_slice(k).get_shape() for k in f.keys()}
    nbytes = {k: 4 * int(np.prod(s)) for k, s in sizes.items()}  # float32
    layer = max(sum(n for k, n in nbytes.items() if f"layers.{i}." in k) for i in range(2))
    fixed = sum(n for k, n in nbytes.items() if "layers." not in k)
    config = json.loads((folder / "text_encoder" / "config.json").read_text())
    working = chat_encoder_working_bytes(config, 512, torch.float32)
    # 2 KiB of slack for the small tensors the ledger counts beside the weights (norms' statistics and such).
    budget = working + fixed + layer + 2048
    assert budget < working + sum(
        nbytes.values()
    )  # the whole encoder would not fit beside its working memory

    whole, _ = embeds("none")
    streamed, transfers = embeds("stream", str(budget))
    assert transfers and transfers[0]["component"] == "text_encoder (streamed)"
    assert torch.equal(whole, streamed)
