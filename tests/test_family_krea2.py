"""Krea 2 end to end: `app --run txt2img.json` on a Krea 2 diffusers folder gives `Krea2Pipeline`'s picture,
for the base model (guidance, a resolution-dependent shift) and Turbo (`is_distilled`: a fixed shift).

The folders are the tiny `demo:tiny-krea2` / `-turbo` fixtures (random weights, fixed seeds; Qwen-Image's
tiny tokenizer, whose system turn splits into the 34 tokens the pipeline drops), saved and loaded by path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from app.main import main
from tests.family_support import REPO, Txt2Img, assert_same_picture, block_sizes, demo_folder

PROMPT = "a small yellow triangle on a black background"
NEGATIVE = "blurry bad quality"
WIDTH, HEIGHT = 40, 56  # 5 x 7 patches (4 px per latent x 2x2 packing): nothing square or even assumed

folder = demo_folder("tiny-krea2")
turbo = demo_folder("tiny-krea2-turbo")
ours = Txt2Img(PROMPT, NEGATIVE, WIDTH, HEIGHT)


def theirs(folder: Path, *, cfg: float, steps: int = 3, seed: int = 42) -> np.ndarray:
    from diffusers import Krea2Pipeline

    pipe = Krea2Pipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    image = pipe(
        PROMPT,
        negative_prompt=NEGATIVE,
        guidance_scale=cfg,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=steps,
        generator=torch.Generator("cpu").manual_seed(seed),
    ).images[0]
    return np.asarray(image.convert("RGB"))


@pytest.mark.slow  # loads the tiny model twice
@pytest.mark.parametrize(("which", "cfg"), [("base", 3.0), ("turbo", 0.0)])
def test_cli_picture_matches_krea2_pipeline(
    which: str, cfg: float, folder: Path, turbo: Path, tmp_path: Path
) -> None:
    path = folder if which == "base" else turbo
    assert_same_picture(
        ours(path, tmp_path, cfg=cfg),
        theirs(path, cfg=cfg),
        (HEIGHT, WIDTH, 3),
        f"krea2 {which} parity cfg {cfg}",
    )


@pytest.mark.slow  # two runs of the tiny model
def test_stream_offload_gives_the_same_picture(folder: Path, tmp_path: Path) -> None:
    ours.assert_stream_is_none(folder, tmp_path, cfg=3.0)


@pytest.mark.slow  # two runs of the tiny model
def test_guidance_and_seed_change_the_picture(folder: Path, tmp_path: Path) -> None:
    ours.assert_guidance_and_seed_matter(folder, tmp_path, cfg=3.0, off=0.0)


@pytest.mark.slow  # builds the tiny model
def test_folder_and_header_are_detected_as_krea2(folder: Path) -> None:
    from pipelines.diffusion.family_detect import detect_family

    assert detect_family(folder) == "krea2"
    assert detect_family(folder / "transformer" / "diffusion_pytorch_model.safetensors") == "krea2"


def test_declared_blocks_let_stream_hold_the_full_size_transformer_in_a_small_budget() -> None:
    """Krea 2's transformer at its published size (the class defaults: 28 blocks of 6144, about 13B) on the
    meta device: outside the declared blocks (text-fusion and transformer blocks) little is left, and no
    block is a large share, so `stream` can hold it in a small budget."""
    from diffusers import Krea2Transformer2DModel

    from pipelines.diffusion.families import FAMILIES

    with torch.device("meta"):
        model = Krea2Transformer2DModel()
    blocks, total, sizes = block_sizes(model, FAMILIES["krea2"].denoiser_blocks)
    assert len(blocks) == 2 + 2 + 28
    assert max(sizes) < 0.05 * total and total - sum(sizes) < 0.05 * total


@pytest.mark.slow  # 0.2-0.6 s a case on the meta device
@pytest.mark.parametrize(
    ("height", "width", "text_tokens", "batch"),
    # Large pictures peak in the blocks, small ones (or long prompts) in the text fusion over 12 taps.
    [
        (1024, 1024, 512, 1),
        (1024, 1024, 128, 1),
        (512, 512, 512, 1),
        (1536, 1024, 512, 1),
        (512, 512, 128, 2),
    ],
)
def test_working_memory_formula_covers_the_full_size_transformer(
    height: int, width: int, text_tokens: int, batch: int
) -> None:
    """The sampler's reservation against what Krea 2's full-width transformer keeps alive (meta device,
    tests/live_tensors.py; two blocks and the text fusion: the peak is within one block). CFG calls it once
    per prompt, so a call's batch is the picture batch."""
    from diffusers import Krea2Transformer2DModel

    from pipelines.diffusion.families import FAMILIES
    from pipelines.diffusion.krea2_sampling import krea2_working_bytes, position_ids
    from pipelines.diffusion.values import DenoiserRef
    from tests.live_tensors import live_tensor_peak

    meta = torch.device("meta")
    with meta:
        model = Krea2Transformer2DModel(num_layers=2)
    h, w = height // 8, width // 8  # latent pixels (the VAE's 8)
    x = torch.zeros(batch, (h // 2) * (w // 2), 64, device=meta)
    embeds = torch.zeros(batch, text_tokens, 12, 2560, device=meta)
    ids = position_ids(text_tokens, h // 2, w // 2, meta)
    mask = torch.ones(batch, text_tokens, dtype=torch.bool, device=meta)
    measured = live_tensor_peak(
        model,
        lambda: model(
            hidden_states=x,
            encoder_hidden_states=embeds,
            timestep=torch.zeros(batch, device=meta),
            position_ids=ids,
            encoder_attention_mask=mask,
            return_dict=False,
        ),
    )
    ref = DenoiserRef(None, FAMILIES["krea2"], dict(model.config), {}, torch.float32)  # type: ignore[arg-type]
    formula = krea2_working_bytes(ref, h, w, batch, text_tokens)
    print(f"krea2 working {height}x{width} text {text_tokens} batch {batch}: {formula / measured:.3f}x")
    # Never below what is alive (a budget would be overrun), at most 15% above (streaming keeps fewer blocks).
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


@pytest.mark.slow  # ~1 s a case on the meta device
@pytest.mark.parametrize("layers", [12, 36])
def test_working_memory_formula_covers_the_full_size_text_encoder(layers: int) -> None:
    """Qwen3-VL-4B's widths (36 layers is the published depth; 12 for a shallower check) over the pipeline's
    prompt block (34 + 512 - 5 + 5 tokens), every hidden state kept and twelve taps stacked, on the meta
    device. The mask is left out and the positions are given (transformers' mask code reads tensor values,
    which meta tensors have none of); a causal-only call keeps the same activations alive."""
    from transformers import Qwen3VLConfig, Qwen3VLModel

    from pipelines.diffusion.krea2_text import DEFAULT_LAYERS, krea2_text_working_bytes
    from tests.live_tensors import live_tensor_peak

    text = dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=layers, num_attention_heads=32)
    text |= dict(num_key_value_heads=8, head_dim=128, vocab_size=151936)
    vision = dict(depth=1, hidden_size=1024, intermediate_size=4096, num_heads=16, out_hidden_size=2560)
    config = Qwen3VLConfig(text_config=text, vision_config=vision, attn_implementation="sdpa")
    meta = torch.device("meta")
    with meta:
        model = Qwen3VLModel(config)
    tokens = 34 + 512
    taps = [i for i in DEFAULT_LAYERS if i <= layers]
    ids = torch.zeros(1, tokens, dtype=torch.long, device=meta)
    positions = torch.arange(tokens, device=meta).view(1, 1, -1).expand(3, 1, -1)

    def call() -> torch.Tensor:
        states = model(input_ids=ids, position_ids=positions, output_hidden_states=True).hidden_states
        return torch.stack([states[i] for i in taps], dim=2)[:, 34:]

    measured = live_tensor_peak(model, call)
    formula = krea2_text_working_bytes(config.to_dict(), tokens, len(taps), torch.float32)
    print(f"krea2 text encoder working, {layers} layers: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


def test_a_krea2_single_file_is_refused_with_a_message() -> None:
    from pipelines.diffusion.families import UnsupportedModelError, detect_single_file_family

    with pytest.raises(UnsupportedModelError, match="Krea 2"):
        detect_single_file_family(["text_fusion.projector.weight", "transformer_blocks.0.attn.to_q.weight"])


@pytest.mark.slow  # loads a model
def test_image_to_image_is_refused(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--run", str(REPO / "resources/workflows/img2img.json"), "--out", str(tmp_path), "--quiet"]
    args += [
        "--set",
        f"load.path={folder}",
        "--set",
        "sampler.scheduler=default",
        "--set",
        "sampler.denoise=0.5",
    ]
    assert main(args) == 1  # a run failure with one clear line, not a traceback
    err = capsys.readouterr().err
    assert "image-to-image" in err and "Traceback" not in err


def test_the_text_encoder_declares_its_layers_at_full_size() -> None:
    """Qwen3-VL-4B (published widths, on the meta device): the declared language and vision blocks cover all
    but the embedding table, so `stream` can hold the 4B encoder in a small budget."""
    from transformers import Qwen3VLConfig, Qwen3VLModel

    from pipelines.diffusion.families import FAMILIES

    text = dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32)
    text |= dict(num_key_value_heads=8, head_dim=128, vocab_size=151936)
    vision = dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, out_hidden_size=2560)
    with torch.device("meta"):
        encoder = Qwen3VLModel(Qwen3VLConfig(text_config=text, vision_config=vision))
    blocks, total, sizes = block_sizes(encoder, FAMILIES["krea2"].text_encoders[0].blocks)
    assert len(blocks) == 36 + 24
    # Outside the blocks: the 151936 x 2560 embedding table (about 9%) and the vision tower's small parts.
    assert max(sizes) < 0.04 * total and total - sum(sizes) < 0.12 * total


@pytest.mark.slow  # loads the tiny model three times
def test_the_transformer_streams_block_by_block_with_the_same_latents(folder: Path, tmp_path: Path) -> None:
    """In a budget that holds the working memory, the weights outside the declared blocks and one block (not
    the whole transformer), `stream` moves the blocks in per call and the sampled latents are unchanged."""
    from safetensors import safe_open

    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.krea2_sampling import krea2_working_bytes
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.sampling import SamplerSettings
    from pipelines.diffusion.values import Latents

    settings = SamplerSettings(scheduler="default", steps=2, cfg=3.0, seed=1)
    h, w = HEIGHT // 4, WIDTH // 4  # the tiny VAE's 4 pixels per latent
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        model = load_model(mm, folder)
        pos = encode_prompt(mm, model.text_encoder, PROMPT)
        neg = encode_prompt(mm, model.text_encoder, NEGATIVE)
    empty = Latents(samples=torch.zeros(1, 4, h, w), vae_scale_factor=4)

    def latents(policy: str, budget: str | None = None) -> tuple[torch.Tensor, list]:
        # A fresh data dir: no peak learned by the runs above replaces the formula the budget is built on.
        config = MemoryConfig(device="cpu", policy=policy, ram_budget=budget, data_dir=tmp_path / policy)
        with MemoryManager(config) as mm:
            out = sample(mm, load_model(mm, folder).denoiser, pos, neg, empty, settings)
            return out.samples, mm.report()["transfers"]

    weights = folder / "transformer" / "diffusion_pytorch_model.safetensors"
    with safe_open(str(weights), framework="pt") as f:
        nbytes = {k: 4 * int(np.prod(f.get_slice(k).get_shape())) for k in f.keys()}  # float32
    parts = ("transformer_blocks.", "layerwise_blocks.", "refiner_blocks.")
    block = max(sum(n for k, n in nbytes.items() if f"{p}{i}." in k) for p in parts for i in range(2))
    fixed = sum(n for k, n in nbytes.items() if not any(p in k for p in parts))
    working = krea2_working_bytes(model.denoiser, h, w, 1, pos.embeds.shape[1])
    budget = working + fixed + block + 2048  # 2 KiB for the small tensors the ledger counts beside weights
    assert budget < working + sum(nbytes.values())  # the whole transformer would not fit beside its working

    whole, _ = latents("none")
    streamed, transfers = latents("stream", str(budget))
    assert any(t["component"] == "transformer (streamed)" for t in transfers)
    assert torch.equal(whole, streamed)
