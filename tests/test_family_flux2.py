"""FLUX.2 [klein] end to end: `app --run txt2img.json` on a Flux2Klein diffusers folder gives the pipeline's picture.

The folder is the tiny `demo:tiny-flux2-klein` fixture (random weights, fixed seeds, its own byte-level BPE
tokenizer and chat template, VAE batch-norm statistics away from 0 and 1), saved to a plain folder and loaded
by path as a user's folder would be. Our side is the CLI: the folder tokenizer's chat template, Qwen3's
hidden layers 9/18/27 through the memory manager, our own loop (`pipelines.diffusion.flux2_sampling`) and the
VAE decode; theirs is `Flux2KleinPipeline.from_pretrained` with the same seed, steps, guidance, size and
prompt. The pipeline's negative prompt is always "", so ours is "" too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.main import main
from pipelines.diffusion.families import FAMILIES, UnsupportedModelError, detect_single_file_family
from pipelines.diffusion.family_detect import detect_family, family_from_keys
from tests.family_support import STREAM, TXT2IMG, Txt2Img, block_sizes, demo_folder

PROMPT = "a small yellow triangle on a black background"
# Not square, and 40 / (4 px per latent x 2x2 patches) = 5 patches across: nothing may assume even or square.
WIDTH, HEIGHT = 40, 56


folder = demo_folder("tiny-flux2-klein")
dev = demo_folder("tiny-flux2-dev")


@pytest.fixture(scope="module")
def distilled(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same weights marked step-distilled in model_index.json, as FLUX.2 [klein] 4B/9B ship."""
    out = tmp_path_factory.mktemp("flux2d") / "tiny-flux2-klein-distilled"
    shutil.copytree(folder, out)
    index = json.loads((out / "model_index.json").read_text())
    (out / "model_index.json").write_text(json.dumps({**index, "is_distilled": True}))
    return out


ours = Txt2Img(PROMPT, "", WIDTH, HEIGHT)


def theirs(folder: Path, *, cfg: float, steps: int = 3, seed: int = 42) -> np.ndarray:
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(str(folder), dtype=torch.float32)  # the folder's own class
    pipe.set_progress_bar_config(disable=True)
    image = pipe(
        prompt=PROMPT,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=steps,
        guidance_scale=cfg,
        generator=torch.Generator("cpu").manual_seed(seed),
    ).images[0]
    return np.asarray(image.convert("RGB"))


def max_diff(a: np.ndarray, b: np.ndarray) -> int:
    assert a.shape == b.shape == (HEIGHT, WIDTH, 3)
    assert b.std() > 5  # a real picture, not a flat one both sides could agree on by accident
    return int(np.abs(a.astype(int) - b.astype(int)).max())


# cfg 4: the base Klein's true CFG `neg + g * (pos - neg)`, two transformer calls a step; cfg 1: no guidance.
@pytest.mark.parametrize("cfg", [4.0, 1.0])
def test_cli_picture_matches_flux2_klein_pipeline(folder: Path, tmp_path: Path, cfg: float) -> None:
    diff = max_diff(ours(folder, tmp_path, cfg=cfg), theirs(folder, cfg=cfg))
    # Same ops on the same CPU kernels; 1 of 255 allows a float32 sum order difference at a rounding edge.
    print(f"flux2 klein parity cfg {cfg}: max uint8 difference {diff}")
    assert diff <= 1


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_a_distilled_klein_ignores_cfg_as_the_pipeline_does(distilled: Path, tmp_path: Path) -> None:
    guided = ours(distilled, tmp_path / "a", cfg=4.0, steps=4)
    diff = max_diff(guided, theirs(distilled, cfg=4.0, steps=4))
    print(f"flux2 klein distilled parity: max uint8 difference {diff}")
    assert diff <= 1  # as above
    assert np.array_equal(guided, ours(distilled, tmp_path / "b", cfg=1.0, steps=4))


# [dev]: cfg is the transformer's guidance embedding, one call a step (the negative is not used).
@pytest.mark.parametrize("cfg", [4.0, 1.5])
def test_cli_picture_matches_flux2_dev_pipeline(dev: Path, tmp_path: Path, cfg: float) -> None:
    diff = max_diff(ours(dev, tmp_path, cfg=cfg), theirs(dev, cfg=cfg))
    print(f"flux2 dev parity cfg {cfg}: max uint8 difference {diff}")
    assert diff <= 1  # as above


@pytest.mark.slow  # three [dev] runs (~2 s); the [dev] parity cases stay in the fast lane
def test_dev_guidance_changes_the_picture_and_streams_the_same(dev: Path, tmp_path: Path) -> None:
    base = ours(dev, tmp_path / "a", cfg=4.0)
    assert not np.array_equal(base, ours(dev, tmp_path / "b", cfg=1.5))
    streamed = ours(dev, tmp_path / "c", cfg=4.0, extra=STREAM)
    assert np.array_equal(base, streamed)


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_guidance_and_seed_change_the_picture(folder: Path, tmp_path: Path) -> None:
    ours.assert_guidance_and_seed_matter(folder, tmp_path, cfg=4.0, off=1.0)


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_stream_offload_gives_the_same_picture(folder: Path, tmp_path: Path) -> None:
    ours.assert_stream_is_none(folder, tmp_path, cfg=4.0)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("latent.width=44", "packs 2x2 latent patches"),  # 11 latents across: odd
        ("sampler.denoise=0.5", "has no image-to-image"),
    ],
)
def test_what_the_pipeline_cannot_do_is_refused_in_one_line(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str, message: str
) -> None:
    args = ["--run", str(TXT2IMG), "--out", str(tmp_path), "--quiet", "--set", f"load.path={folder}"]
    args += ["--set", "sampler.scheduler=default", "--set", "sampler.steps=1", "--set", setting]
    assert main(args) == 1  # a run failure with one clear line, not a traceback
    err = capsys.readouterr().err
    assert f"FLUX.2 [klein] {message}" in err
    assert "Traceback" not in err


def test_folder_and_headers_are_detected_as_flux2_klein(folder: Path, dev: Path) -> None:
    assert detect_family(folder) == "flux2_klein"
    assert detect_family(dev) == "flux2_dev"
    assert detect_family(dev / "transformer" / "diffusion_pytorch_model.safetensors") == "flux2_dev"
    assert detect_family(folder / "transformer" / "diffusion_pytorch_model.safetensors") == "flux2_klein"
    # FLUX.1's diffusers keys share `single_transformer_blocks.`; they stay Flux.
    assert family_from_keys(["single_transformer_blocks.0.attn.to_q.weight"], {}) == "flux"
    # Loaded as a single file it is refused by name (diffusers folders only, for now).
    with pytest.raises(UnsupportedModelError, match="FLUX.2"):
        detect_single_file_family(["double_stream_modulation_img.linear.weight"])


@pytest.mark.parametrize(
    ("family", "config", "count", "largest", "outside"),
    [
        # [klein] 4B: 24 heads of 128, 5 double- and 20 single-stream blocks, Qwen3-4B's 3 x 2560 features;
        # a double-stream block is 6.3% of the ~3.9B parameters, the modulations and text projection 5%.
        (
            "flux2_klein",
            dict(
                num_layers=5,
                num_single_layers=20,
                num_attention_heads=24,
                joint_attention_dim=7680,
                guidance_embeds=False,
            ),
            25,
            0.07,
            0.06,
        ),
        # [dev]: the class defaults are its published config (8 + 48 blocks, ~32B parameters).
        ("flux2_dev", {}, 56, 0.035, 0.03),
    ],
)
def test_declared_blocks_let_stream_hold_the_full_size_transformer_in_a_small_budget(
    family: str, config: dict, count: int, largest: float, outside: float
) -> None:
    """On the meta device: streaming keeps the weights outside the declared blocks plus a window of the
    largest block, so both must be a small part of the model."""
    from diffusers import Flux2Transformer2DModel

    with torch.device("meta"):
        model = Flux2Transformer2DModel(**config)
    blocks, total, sizes = block_sizes(model, FAMILIES[family].denoiser_blocks)
    assert len(blocks) == count
    assert max(sizes) < largest * total and total - sum(sizes) < outside * total


@pytest.mark.parametrize(
    ("heads", "joint", "side", "text"),
    [
        (24, 7680, 512, 512),
        (24, 7680, 1024, 512),
        (24, 7680, 1536, 512),
        (32, 12288, 1024, 512),
        (48, 15360, 1024, 77),
    ],
)
def test_working_memory_formula_covers_the_full_size_transformer(
    heads: int, joint: int, side: int, text: int
) -> None:
    """The sampler's reservation against what the transformer keeps alive (meta device, measured with
    tests/live_tensors.py) at the published widths: [klein] 4B (24 heads), 9B (32), [dev] (48); one block of
    each kind is enough, the peak is within one. 512 text tokens is what the pipeline always passes."""
    from diffusers import Flux2Transformer2DModel

    from pipelines.diffusion.flux2_sampling import flux2_working_bytes
    from tests.live_tensors import live_tensor_peak

    meta = torch.device("meta")
    with meta:
        model = Flux2Transformer2DModel(
            num_layers=1,
            num_single_layers=1,
            num_attention_heads=heads,
            joint_attention_dim=joint,
            guidance_embeds=False,
        )
    image = (side // 16) ** 2  # 8 px per latent, 2x2 latents per token
    x = torch.zeros(1, image, 128, device=meta)
    img_ids = torch.zeros(1, image, 4, dtype=torch.long, device=meta)
    embeds = torch.zeros(1, text, joint, device=meta)
    txt_ids = torch.zeros(1, text, 4, dtype=torch.long, device=meta)

    def call() -> object:
        return model(
            hidden_states=x,
            timestep=torch.zeros(1, device=meta),
            guidance=None,
            encoder_hidden_states=embeds,
            txt_ids=txt_ids,
            img_ids=img_ids,
            return_dict=False,
        )

    measured = live_tensor_peak(model, call)
    formula = flux2_working_bytes(dict(model.config), image + text, 1, torch.float32)
    # Never below what is alive (a budget would be overrun), at most 15% above (streaming keeps fewer blocks).
    print(f"flux2 working {heads} heads {side}px text {text}: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_the_text_encoder_streams_layer_by_layer_with_the_same_embeddings(
    folder: Path, tmp_path: Path
) -> None:
    """Klein's Qwen3 declares its layers: in a budget that holds its working memory, the weights outside the
    layers and one layer, `stream` moves the rest in per call and the prompt's (1, 512, 3 x hidden)
    embeddings are unchanged."""
    from safetensors import safe_open

    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.working import chat_encoder_working_bytes

    def embeds(policy: str, budget: str | None = None) -> tuple[torch.Tensor, list]:
        # Own data dirs: a peak learned by an earlier encode (no KV cache is kept, so it is below the formula)
        # would let the whole encoder fit the budget and nothing would stream.
        config = MemoryConfig(device="cpu", policy=policy, ram_budget=budget, data_dir=tmp_path / policy)
        with MemoryManager(config) as mm:
            cond = encode_prompt(mm, load_model(mm, folder).text_encoder, PROMPT)
            return cond.embeds, mm.report()["transfers"]

    with safe_open(str(folder / "text_encoder" / "model.safetensors"), framework="pt") as f:
        nbytes = {k: 4 * int(np.prod(f.get_slice(k).get_shape())) for k in f.keys()}  # float32
    layer = max(sum(n for k, n in nbytes.items() if f"layers.{i}." in k) for i in range(28))
    # The ledger counts the file's bytes, the unused `lm_head` of Qwen3ForCausalLM among them.
    fixed = sum(n for k, n in nbytes.items() if "layers." not in k)
    config = json.loads((folder / "text_encoder" / "config.json").read_text())
    working = chat_encoder_working_bytes(config, 512, torch.float32)
    # 2 KiB of slack for the small tensors the ledger counts beside the weights (norms' statistics and such).
    budget = working + fixed + layer + 2048
    assert budget < working + sum(
        nbytes.values()
    )  # the whole encoder would not fit beside its working memory

    whole, _ = embeds("none")
    assert whole.shape == (1, 512, 3 * 16)
    streamed, transfers = embeds("stream", str(budget))
    assert transfers and transfers[0]["component"] == "text_encoder (streamed)"
    assert torch.equal(whole, streamed)


def _reference_picture(path: Path) -> Path:
    """A ramp of another size than the output (the pipeline takes references of at least 64 px a side)."""
    ramp = np.linspace(0, 255, 80 * 64 * 3).reshape(80, 64, 3)
    Image.fromarray(ramp.astype(np.uint8)).save(path)
    return path


@pytest.mark.slow  # the fast lane keeps this family's parity cases; this one runs in make test
def test_editing_with_a_reference_picture_matches_the_pipeline(folder: Path, tmp_path: Path) -> None:
    """LoadImage -> VAE Encode -> Reference Latent on the positive prompt = `Flux2KleinPipeline(image=...)`:
    the picture's tokens join the image's at time coordinate 10. On the tiny model a reference moves the
    picture by about one uint8 level, so the latents are compared too, where it moves them 1000x the
    tolerance."""
    from dataclasses import replace

    from diffusers import Flux2KleinPipeline

    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.flux2_latents import bn_denormalize
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.sampling import SamplerSettings
    from pipelines.diffusion.vae import encode
    from pipelines.diffusion.values import Latents

    picture = _reference_picture(tmp_path / "ref.png")
    workflow = json.loads(TXT2IMG.read_text())
    nodes = workflow["nodes"]
    nodes["image"] = {"type": "LoadImage", "params": {"path": str(picture)}, "inputs": {}}
    nodes["encode"] = {
        "type": "VAEEncode",
        "params": {},
        "inputs": {"vae": ["load", "vae"], "image": ["image", "image"]},
    }
    nodes["ref"] = {
        "type": "ReferenceLatent",
        "params": {},
        "inputs": {"conditioning": ["positive", "conditioning"], "latent": ["encode", "latent"]},
    }
    nodes["sampler"]["inputs"]["positive"] = ["ref", "conditioning"]
    edit = tmp_path / "edit.json"
    edit.write_text(json.dumps(workflow))
    sets = [f"load.path={folder}", "sampler.scheduler=default", "sampler.steps=3", "sampler.cfg=4.0"]
    sets += [f"latent.width={WIDTH}", f"latent.height={HEIGHT}", f"positive.text={PROMPT}", "negative.text="]
    args = ["--run", str(edit), "--out", str(tmp_path / "out"), "--quiet", "--device", "cpu"]
    assert main([*args, *(x for s in sets for x in ("--set", s))]) == 0
    (png,) = sorted((tmp_path / "out").glob("*.png"))

    pipe = Flux2KleinPipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    call = dict(prompt=PROMPT, height=HEIGHT, width=WIDTH, num_inference_steps=3, guidance_scale=4.0)
    image = pipe(image=Image.open(picture), generator=torch.Generator("cpu").manual_seed(42), **call).images[
        0
    ]
    diff = max_diff(np.asarray(Image.open(png).convert("RGB")), np.asarray(image.convert("RGB")))
    print(f"flux2 klein edit parity: max uint8 difference {diff}")
    assert diff <= 1  # as in the text-to-image parity

    theirs_latents = pipe(
        image=Image.open(picture),
        generator=torch.Generator("cpu").manual_seed(42),
        output_type="latent",
        **call,
    ).images
    pixels = torch.from_numpy(np.asarray(Image.open(picture)).astype(np.float32) / 255)[None]
    settings = SamplerSettings(seed=42, steps=3, cfg=4.0, scheduler="default")
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        model = load_model(mm, folder)
        positive = encode_prompt(mm, model.text_encoder, PROMPT)
        negative = encode_prompt(mm, model.text_encoder, "")
        empty = Latents(samples=torch.zeros(1, 8, HEIGHT // 4, WIDTH // 4), vae_scale_factor=4)
        edited = replace(positive, references=(encode(mm, model.vae, pixels),))
        with_ref = sample(mm, model.denoiser, edited, negative, empty, settings).samples
        without = sample(mm, model.denoiser, positive, negative, empty, settings).samples
    # Same CPU kernels in the same order; 1e-5 leaves room for a float32 rounding difference.
    assert torch.allclose(bn_denormalize(pipe.vae, with_ref), theirs_latents, atol=1e-5)
    assert (bn_denormalize(pipe.vae, without) - theirs_latents).abs().max() > 1e-2  # the reference mattered
