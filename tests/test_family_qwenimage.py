"""Qwen-Image end to end: `app --run txt2img.json` on a Qwen-Image diffusers folder gives QwenImagePipeline's
picture.

The folder is the tiny `demo:tiny-qwenimage` fixture (random weights, fixed seeds, its own byte-level BPE
tokenizer), saved to a plain folder and loaded by path as a user's folder would be. Our side is the CLI: the
pipeline's prompt template through the folder's tokenizer, Qwen2.5-VL through the memory manager, our own loop
(`pipelines.diffusion.qwenimage_sampling`, true CFG) and the 3D VAE's decode; theirs is
`QwenImagePipeline.from_pretrained` with the same seed, steps, `true_cfg_scale`, size and prompts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.main import main
from pipelines.diffusion.families import FAMILIES, UnsupportedModelError, detect_single_file_family
from pipelines.diffusion.family_detect import detect_family, family_from_class_name, family_from_keys
from tests.family_support import REPO, TXT2IMG, Txt2Img, assert_same_picture, block_sizes, demo_folder

PROMPT = "a small yellow triangle on a black background"
NEGATIVE = "blurry bad quality"
# Odd on purpose: 40 / (4 px per latent x 2x2 packing) = 5 patches across, so nothing assumes square or even.
WIDTH, HEIGHT = 40, 56


folder = demo_folder("tiny-qwenimage")
ours = Txt2Img(PROMPT, NEGATIVE, WIDTH, HEIGHT)


def theirs(folder: Path, *, cfg: float, steps: int = 3, seed: int = 42) -> np.ndarray:
    from diffusers import QwenImagePipeline

    pipe = QwenImagePipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    image = pipe(
        PROMPT,
        negative_prompt=NEGATIVE,
        true_cfg_scale=cfg,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=steps,
        generator=torch.Generator("cpu").manual_seed(seed),
    ).images[0]
    return np.asarray(image.convert("RGB"))


def test_the_tiny_tokenizer_splits_the_system_turn_as_qwen_does(folder: Path) -> None:
    """The pipeline drops the first 34 tokens (Qwen's tokenizer's count for its system turn): the tiny
    tokenizer must agree, or the prompt's own tokens would be cut and the parity below would prove less."""
    from transformers import AutoTokenizer

    from pipelines.diffusion.qwenimage_text import PROMPT_TEMPLATE, TEMPLATE_START

    tokenizer = AutoTokenizer.from_pretrained(str(folder / "tokenizer"))
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(PROMPT_TEMPLATE.format(PROMPT)).input_ids)
    assert tokens[TEMPLATE_START - 3 : TEMPLATE_START] == ["<|im_start|>", "user", "Ċ"]


# cfg 3: true CFG (a second call for the negative, SD's rule, the per-token norm rescale); cfg 1: the
# pipeline's "no guidance" (`true_cfg_scale <= 1`: the negative prompt is unused).
@pytest.mark.parametrize("cfg", [3.0, 1.0])
def test_cli_picture_matches_qwenimage_pipeline(folder: Path, tmp_path: Path, cfg: float) -> None:
    a, b = ours(folder, tmp_path, cfg=cfg), theirs(folder, cfg=cfg)
    assert_same_picture(a, b, (HEIGHT, WIDTH, 3), f"qwenimage parity cfg {cfg}")


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_image_to_image_matches_the_img2img_pipeline(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """denoise 0.6 = QwenImageImg2ImgPipeline's strength 0.6. Its VAE encode samples the latent distribution
    with the seed's generator; ours (VAE Encode) takes the mode, so theirs is made to take the mode too and
    the noise draws line up."""
    from diffusers import QwenImageImg2ImgPipeline
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_img2img

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
        pipeline_qwenimage_img2img, "retrieve_latents", lambda out, generator=None: out.latent_dist.mode()
    )
    pipe = QwenImageImg2ImgPipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    b = pipe(
        PROMPT,
        image=Image.open(picture),
        strength=0.6,
        negative_prompt=NEGATIVE,
        true_cfg_scale=3.0,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=5,
        generator=torch.Generator("cpu").manual_seed(42),
    ).images[0]
    b = np.asarray(b.convert("RGB"))
    assert a.shape == b.shape == (HEIGHT, WIDTH, 3)
    # As above: 1 of 255 for a float32 rounding edge.
    diff = np.abs(a.astype(int) - b.astype(int)).max()
    print(f"qwenimage img2img parity: max uint8 difference {diff}")
    assert diff <= 1


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_guidance_and_seed_change_the_picture(folder: Path, tmp_path: Path) -> None:
    ours.assert_guidance_and_seed_matter(folder, tmp_path, cfg=3.0, off=1.0)


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_stream_offload_gives_the_same_picture(folder: Path, tmp_path: Path) -> None:
    ours.assert_stream_is_none(folder, tmp_path, cfg=3.0)


# Odd latent sides (44 px here) run padded, as ComfyUI runs them: tests/test_qwenimage_odd_latent.py.


def test_folder_and_headers_are_detected_as_qwenimage(folder: Path) -> None:
    assert detect_family(folder) == "qwenimage"
    assert detect_family(folder / "transformer" / "diffusion_pytorch_model.safetensors") == "qwenimage"
    # The other Qwen-Image pipelines are different models (Qwen3-VL, other transformers): not this family;
    # Qwen-Image-Edit and Qwen-Image 2.1 are their own (tests/test_family_qwenimage_edit.py, _qwenimage21.py).
    assert family_from_class_name("QwenImage21Pipeline") == "qwenimage21"
    assert family_from_class_name("QwenImageEditPipeline") == "qwenimage_edit"
    original = [
        "model.diffusion_model.txt_norm.weight",
        "model.diffusion_model.transformer_blocks.0.img_mod.1.weight",
    ]
    assert family_from_keys(original, {}) == "qwenimage"
    with pytest.raises(UnsupportedModelError, match="Qwen-Image"):
        detect_single_file_family(original)
    # Flux's original keys have img_mod too, but double_blocks and no txt_norm: still Flux.
    assert family_from_keys(["double_blocks.0.img_mod.lin.weight", "txt_in.weight"], {}) == "flux"


def test_declared_blocks_let_stream_hold_the_full_size_models_in_a_small_budget() -> None:
    """Qwen-Image's transformer (the class defaults are its published config: 60 blocks, ~20B parameters)
    and its Qwen2.5-VL-7B text encoder, on the meta device: streaming keeps the weights outside the declared
    blocks plus a window of the largest block, so both must be a small part of the whole."""
    from diffusers import QwenImageTransformer2DModel
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    with torch.device("meta"):
        model = QwenImageTransformer2DModel()
    blocks, total, sizes = block_sizes(model, FAMILIES["qwenimage"].denoiser_blocks)
    assert len(blocks) == 60
    assert max(sizes) < 0.02 * total and total - sum(sizes) < 0.01 * total

    # Qwen2.5-VL-7B-Instruct's published sizes (the text encoder of Qwen/Qwen-Image).
    text = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28)
    text |= dict(num_key_value_heads=4, vocab_size=152064)
    vision = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584)
    with torch.device("meta"):
        encoder = Qwen2_5_VLForConditionalGeneration(
            Qwen2_5_VLConfig(text_config=text, vision_config=vision, vocab_size=152064)
        )
    blocks, total, sizes = block_sizes(encoder, FAMILIES["qwenimage"].text_encoders[0].blocks)
    assert len(blocks) == 28 + 32
    # Outside the blocks: the embedding table and the LM head (152064 x 3584 each, untied), about 13%.
    assert max(sizes) < 0.04 * total and total - sum(sizes) < 0.15 * total


@pytest.mark.parametrize(
    ("height", "width", "caption", "batch"),
    [(1024, 1024, 512, 1), (1024, 1024, 77, 1), (768, 512, 100, 1), (1536, 1024, 300, 1), (512, 512, 50, 2)],
)
def test_working_memory_formula_covers_the_full_size_transformer(
    height: int, width: int, caption: int, batch: int
) -> None:
    """The sampler's reservation against what Qwen-Image's transformer keeps alive (meta device, measured
    with tests/live_tensors.py; two blocks are enough, the peak is within one). True CFG calls it once per
    prompt, so a call's batch is the picture batch whatever the guidance."""
    from diffusers import QwenImageTransformer2DModel

    from pipelines.diffusion.qwenimage_working import qwenimage_working_bytes
    from pipelines.diffusion.values import DenoiserRef
    from tests.live_tensors import live_tensor_peak

    meta = torch.device("meta")
    with meta:
        model = QwenImageTransformer2DModel(num_layers=2)
    h, w = height // 8, width // 8  # latent pixels (the VAE's 8)
    x = torch.zeros(batch, (h // 2) * (w // 2), 64, device=meta)
    embeds = torch.zeros(batch, caption, 3584, device=meta)
    measured = live_tensor_peak(
        model,
        lambda: model(
            hidden_states=x,
            encoder_hidden_states=embeds,
            timestep=torch.zeros(batch, device=meta),
            img_shapes=[[(1, h // 2, w // 2)]] * batch,
            return_dict=False,
        ),
    )
    ref = DenoiserRef(None, FAMILIES["qwenimage"], dict(model.config), {}, torch.float32)  # type: ignore[arg-type]
    formula = qwenimage_working_bytes(ref, h, w, batch, caption)
    # Never below what is alive (a budget would be overrun), at most 15% above (streaming keeps fewer blocks).
    print(f"qwenimage working {height}x{width} caption {caption} batch {batch}: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_the_text_encoder_streams_layer_by_layer_with_the_same_embeddings(
    folder: Path, tmp_path: Path
) -> None:
    """Qwen-Image's text encoder (8B parameters at full size) declares its layers: in a budget that holds
    its working memory, the weights outside the blocks and one block, `stream` moves the rest in per call
    and the prompt's embeddings are unchanged."""
    import json

    from safetensors import safe_open
    from transformers import AutoTokenizer

    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.qwenimage_text import PROMPT_TEMPLATE, qwenimage_text_working_bytes

    def embeds(policy: str, budget: str | None = None) -> tuple[torch.Tensor, list]:
        # A fresh data dir: no peak learned by the runs above replaces the formula the budget is built on.
        config = MemoryConfig(device="cpu", policy=policy, ram_budget=budget, data_dir=tmp_path / policy)
        with MemoryManager(config) as mm:
            cond = encode_prompt(mm, load_model(mm, folder).text_encoder, PROMPT)
            return cond.embeds, mm.report()["transfers"]

    weights = folder / "text_encoder" / "model.safetensors"
    with safe_open(str(weights), framework="pt") as f:
        nbytes = {k: 4 * int(np.prod(f.get_slice(k).get_shape())) for k in f.keys()}  # float32
    in_block = [f"{kind}.{i}." for kind in ("layers", "blocks") for i in range(2)]
    block = max(sum(n for k, n in nbytes.items() if part in k) for part in in_block)
    fixed = sum(n for k, n in nbytes.items() if not any(part in k for part in in_block))
    config = json.loads((folder / "text_encoder" / "config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(str(folder / "tokenizer"))
    tokens = len(tokenizer(PROMPT_TEMPLATE.format(PROMPT)).input_ids)
    working = qwenimage_text_working_bytes(config, tokens, torch.float32)
    # 2 KiB of slack for the small tensors the ledger counts beside the weights (norms' statistics and such).
    budget = working + fixed + block + 2048
    assert budget < working + sum(
        nbytes.values()
    )  # the whole encoder would not fit beside its working memory

    whole, _ = embeds("none")
    streamed, transfers = embeds("stream", str(budget))
    assert transfers and transfers[0]["component"] == "text_encoder (streamed)"
    assert torch.equal(whole, streamed)


@pytest.mark.parametrize(
    ("layers", "tokens"),
    # The fast lane keeps the 4-layer case (the same formula and code path); the published depth took 11 s
    # of a fast-lane run on the busy 2 cores (4 layers: 2.5 s), so both 28-layer cases run in `make test`.
    [
        (4, 64),
        pytest.param(28, 64, marks=pytest.mark.slow),
        pytest.param(28, 34 + 512, marks=pytest.mark.slow),
    ],
)
def test_working_memory_formula_covers_the_full_size_text_encoder(layers: int, tokens: int) -> None:
    """Qwen2.5-VL-7B's widths (28 layers is the published depth) over a short prompt and the longest the
    pipeline keeps (its 34 template tokens plus 512), on the meta device. The attention mask is left out and
    the positions are given: transformers' mask and multimodal-rope code read tensor values (`.item()`),
    which meta tensors have none of; a causal-only text call keeps the same activations alive."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from pipelines.diffusion.qwenimage_text import qwenimage_text_working_bytes
    from tests.live_tensors import live_tensor_peak

    text = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=layers, num_attention_heads=28)
    text |= dict(num_key_value_heads=4, vocab_size=152064)
    vision = dict(depth=1, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584)
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, vocab_size=152064, attn_implementation="sdpa"
    )
    meta = torch.device("meta")
    with meta:
        model = Qwen2_5_VLForConditionalGeneration(config)
    ids = torch.zeros(1, tokens, dtype=torch.long, device=meta)
    positions = torch.arange(tokens, device=meta).view(1, 1, -1).expand(3, 1, -1)  # text: t = h = w
    measured = live_tensor_peak(
        model, lambda: model(input_ids=ids, position_ids=positions, output_hidden_states=True)
    )
    formula = qwenimage_text_working_bytes(config.to_dict(), tokens, torch.float32)
    print(f"qwenimage text encoder working, {layers} layers, {tokens} tokens: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_the_transformer_streams_block_by_block_with_the_same_latents(folder: Path, tmp_path: Path) -> None:
    """The transformer's declared blocks under `stream` in a budget that holds its working memory, the
    weights outside the blocks and one block (not the whole transformer): the blocks move in per call and
    the sampled latents are unchanged."""
    from safetensors import safe_open

    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.qwenimage_working import qwenimage_working_bytes
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
    block = max(sum(n for k, n in nbytes.items() if f"transformer_blocks.{i}." in k) for i in range(2))
    fixed = sum(n for k, n in nbytes.items() if "transformer_blocks." not in k)
    text_tokens = max(pos.embeds.shape[1], neg.embeds.shape[1])
    working = qwenimage_working_bytes(model.denoiser, h, w, 1, text_tokens)  # the ref's config and dtype
    # 2 KiB of slack for the small tensors the ledger counts beside the weights.
    budget = working + fixed + block + 2048
    assert budget < working + sum(nbytes.values())  # the whole transformer would not fit beside its working

    whole, _ = latents("none")
    streamed, transfers = latents("stream", str(budget))
    assert any(t["component"] == "transformer (streamed)" for t in transfers)
    assert torch.equal(whole, streamed)


@pytest.mark.slow
def test_an_unwired_sampler_latent_has_the_vae_channels(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Sampler with no latent wired makes one from the denoiser alone: the transformer's in_channels count
    2x2-packed channels, so the latent has a quarter of them (the tiny VAE's 4), and the run succeeds."""
    import json
    from dataclasses import replace

    # The family's native size, made small here: 1024 x 1024 through the 3D VAE took two minutes on a busy
    # 2-core machine, and the size rule (no sample_size in the config: the family's native) is the same.
    monkeypatch.setitem(FAMILIES, "qwenimage", replace(FAMILIES["qwenimage"], native_size=128))

    graph = json.loads(TXT2IMG.read_text())
    graph["nodes"]["sampler"]["inputs"].pop("latent")
    del graph["nodes"]["latent"]
    path = tmp_path / "unwired.json"
    path.write_text(json.dumps(graph))
    args = ["--run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--set", f"load.path={folder}"]
    # 2 steps: at 1, Qwen-Image's terminal shift makes NaN latents, which the Sampler now refuses.
    args += ["--set", "sampler.scheduler=default", "--set", "sampler.steps=2"]
    assert main(args) == 0, capsys.readouterr().err
    (png,) = sorted((tmp_path / "out").glob("*.png"))
    # No sample_size in the transformer's config: the family's native size (the real one is 1024).
    assert FAMILIES["qwenimage"].native_size == 128 and Image.open(png).size == (128, 128)
