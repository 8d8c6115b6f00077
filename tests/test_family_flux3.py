"""FLUX.3 end to end: `app --run txt2img.json` on a FLUX.3 diffusers folder gives the picture of diffusers'
modular `Flux3AutoBlocks` (the family's only pipeline in diffusers 0.42.1: there is no `DiffusionPipeline`), and
`--offload stream` gives the same picture as `none`.

The folder is the tiny `demo:tiny-flux3` fixture (random weights, fixed seeds), saved and loaded by path. The
reference drops the blocks' prompt upsampler (a Qwen3.5 LLM rewriting the prompt; the pipeline's own docs say to
pop it to encode the prompt as given), and its `tokenizer` component (a Qwen3-VL processor in a real folder) is
`Qwen3VLProcessor` holding the folder's tokenizer and chat template, built without its image and video halves
(the video processor needs torchvision, not installed): the text encoder step uses only its `apply_chat_template`
and `tokenizer`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.family_support import Txt2Img, assert_same_picture, block_sizes, demo_folder

PROMPT = "a small yellow triangle on a black background"
NEGATIVE = "blurry bad quality"
WIDTH, HEIGHT = 40, 56  # 5 x 7 packed patches (4 px per latent x 2x2): nothing square assumed


folder = demo_folder("tiny-flux3")
ours = Txt2Img(PROMPT, NEGATIVE, WIDTH, HEIGHT)  # 3 steps, seed 42, as `theirs`


def theirs(folder: Path, *, cfg: float) -> np.ndarray:
    from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux3Transformer2DModel
    from diffusers.guiders import ClassifierFreeGuidance
    from diffusers.modular_pipelines import Flux3AutoBlocks
    from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration, Qwen3VLProcessor

    tokenizer = AutoTokenizer.from_pretrained(str(folder / "tokenizer"))
    processor = Qwen3VLProcessor.__new__(Qwen3VLProcessor)  # see the module docstring
    processor.tokenizer = tokenizer
    processor.chat_template = tokenizer.chat_template
    processor.image_processor = processor.video_processor = None
    blocks = Flux3AutoBlocks()
    blocks.sub_blocks.pop("prompt_upsampler")
    pipe = blocks.init_pipeline()
    pipe.update_components(
        transformer=Flux3Transformer2DModel.from_pretrained(str(folder / "transformer")),
        vae=AutoencoderKLFlux2.from_pretrained(str(folder / "vae")),
        text_encoder=Qwen3VLForConditionalGeneration.from_pretrained(
            str(folder / "text_encoder"), dtype=torch.float32
        ),
        tokenizer=processor,
        scheduler=FlowMatchEulerDiscreteScheduler.from_pretrained(str(folder / "scheduler")),
        guider=ClassifierFreeGuidance(guidance_scale=cfg),
    )
    state = pipe(
        prompt=PROMPT,
        negative_prompt=NEGATIVE,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=3,
        generator=torch.Generator("cpu").manual_seed(42),
        output_type="np",
    )
    return (np.asarray(state.get("images"))[0] * 255).round().astype(np.uint8)


@pytest.mark.slow  # loads the tiny model twice
def test_cli_picture_matches_flux3_modular_pipeline(folder: Path, tmp_path: Path) -> None:
    a, b = ours(folder, tmp_path, cfg=3.0), theirs(folder, cfg=3.0)
    assert_same_picture(a, b, (HEIGHT, WIDTH, 3), "flux3 parity cfg 3")


@pytest.mark.slow  # two runs of the tiny model
def test_stream_offload_gives_the_same_picture(folder: Path, tmp_path: Path) -> None:
    ours.assert_stream_is_none(folder, tmp_path, cfg=3.0)


@pytest.mark.slow  # builds the tiny model
def test_folder_is_detected_as_flux3(folder: Path) -> None:
    from pipelines.diffusion.family_detect import detect_family

    assert detect_family(folder) == "flux3"


def test_declared_blocks_cover_the_transformer() -> None:
    """The class defaults' transformer (5 per-mode blocks a mode, 28 joint blocks of 3072) on the meta device:
    outside the declared blocks (text and image mode blocks, joint blocks) little is left, and no block is a large
    share, so `stream` can hold it in a small budget (the reference-image mode's blocks stay resident unused)."""
    from diffusers import Flux3Transformer2DModel

    from pipelines.diffusion.families import FAMILIES

    with torch.device("meta"):
        model = Flux3Transformer2DModel()
    blocks, total, sizes = block_sizes(model, FAMILIES["flux3"].denoiser_blocks)
    assert len(blocks) == 5 + 5 + 28
    assert max(sizes) < 0.05 * total and total - sum(sizes) < 0.2 * total


@pytest.mark.slow  # ~1-3 s a case on the meta device
@pytest.mark.parametrize(("side", "text_tokens"), [(512, 80), (1536, 240), (1024, 640)])
def test_working_memory_formula_covers_the_full_width_transformer(side: int, text_tokens: int) -> None:
    """The sampler's reservation against what the class defaults' transformer (width 3072, 8 x 2560 text
    features) keeps alive on the meta device (tests/live_tensors.py; one mode block and two joint blocks: the
    peak is within one block). Guidance calls it once per prompt, so a call's batch is the picture batch."""
    from diffusers import Flux3Transformer2DModel

    from pipelines.diffusion.flux3_sampling import flux3_working_bytes, image_ids, text_ids
    from tests.live_tensors import live_tensor_peak

    meta = torch.device("meta")
    with meta:
        model = Flux3Transformer2DModel(num_layers=1, num_single_layers=2)
    grid = side // 16  # the VAE's 8 x the 2x2 packing
    x = torch.zeros(1, grid * grid, 128, device=meta)
    embeds = torch.zeros(1, text_tokens, 8 * 2560, device=meta)
    measured = live_tensor_peak(
        model,
        lambda: model(
            hidden_states=x,
            encoder_hidden_states=embeds,
            timestep=torch.zeros(1, device=meta),
            img_ids=image_ids(grid, grid, meta),
            txt_ids=text_ids(text_tokens, meta),
            return_dict=False,
        ),
    )
    formula = flux3_working_bytes(dict(model.config), grid * grid, text_tokens, torch.float32)
    print(f"flux3 working {side}px text {text_tokens}: {formula / measured:.3f}x")
    # Never below what is alive (a budget would be overrun), at most 15% above (streaming keeps fewer blocks).
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"
