"""Qwen-Image-Edit end to end: `app --run edit_qwenimage.json` on a Qwen-Image-Edit diffusers folder gives
`QwenImageEditPlusPipeline`'s picture (2509 and 2511), and TextEncodeQwenImageEdit gives
`QwenImageEditPipeline`'s (the first release).

The folders are the tiny `demo:tiny-qwenimage-edit` / `-2511` fixtures (random weights, fixed seeds), saved
and loaded by path as a user's folder would be. Theirs is the pipeline with the folder's components and a
real `Qwen2VLProcessor` built without a video processor (torchvision is not installed; see
`pipelines.diffusion.demo_qwenimage_edit`). The pipelines resize every picture to about 1024 x 1024 px (and
384 x 384 px for the VL model in Plus); the tiny models run at small areas instead, on both sides: ours
through the nodes' `vae_pixels` / `vl_pixels`, theirs by setting the pipeline module's area constants.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from app.main import main
from tests.demo_support import copy_demo_model
from tests.family_support import demo_folder

REPO = Path(__file__).resolve().parent.parent
EDIT = REPO / "resources/workflows/edit_qwenimage.json"
PROMPT = "make the circle a yellow triangle"
NEGATIVE = "blurry bad quality"
# Odd patch counts on purpose: 40 / (4 px per latent x 2x2 packing) = 5 patches across.
WIDTH, HEIGHT = 40, 56
VAE_AREA = 64 * 96  # the pictures' VAE size: 64x96 for a 2:3 picture (multiples of 32)
VL_AREA = 56 * 84  # what the VL model sees in Plus: 56x84 -> 4x6 merged tokens


folder = demo_folder("tiny-qwenimage-edit")


def picture(path: Path, seed: int = 0, size: tuple[int, int] = (60, 90)) -> Path:
    """A smooth random picture (w x h): not a multiple of anything, so every resize does something."""
    w, h = size
    rng = np.random.RandomState(seed)
    ramp = np.linspace(0, 1, w * h * 3).reshape(h, w, 3)
    array = (255 * (0.6 * ramp + 0.4 * rng.rand(h, w, 3))).astype(np.uint8)
    Image.fromarray(array).save(path)
    return path


def ours(
    folder: Path,
    out: Path,
    image: Path,
    *,
    cfg: float = 4.0,
    steps: int = 3,
    extra: tuple = (),
    workflow: Path = EDIT,
    vl: bool = True,
) -> np.ndarray:
    sets: dict[str, Any] = {
        "load.path": str(folder),
        "image.path": str(image),
        "sampler.steps": steps,
        "sampler.cfg": cfg,
        "latent.width": WIDTH,
        "latent.height": HEIGHT,
        "positive.prompt": PROMPT,
        "negative.prompt": NEGATIVE,
    }
    for side in ("positive", "negative"):
        sets[f"{side}.vae_pixels"] = VAE_AREA
        if vl:  # TextEncodeQwenImageEdit has no vl_pixels: the VL model sees the VAE-sized picture
            sets[f"{side}.vl_pixels"] = VL_AREA
    args = ["--run", str(workflow), "--out", str(out), "--quiet", "--device", "cpu", *extra]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    assert main(args) == 0
    (png,) = sorted(out.glob("*.png"))
    return np.asarray(Image.open(png).convert("RGB"))


def reference_processor(folder: Path) -> Any:
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from pipelines.diffusion.demo_qwenimage_edit import qwen2vl_processor

    processor = folder / "processor"
    return qwen2vl_processor(
        Qwen2VLImageProcessorPil.from_pretrained(str(processor)),
        AutoTokenizer.from_pretrained(str(processor)),
    )


def theirs_plus(
    folder: Path, images: list[Path], monkeypatch: pytest.MonkeyPatch, *, cfg: float = 4.0, steps: int = 3
) -> np.ndarray:
    from diffusers import QwenImageEditPlusPipeline
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus

    monkeypatch.setattr(pipeline_qwenimage_edit_plus, "VAE_IMAGE_SIZE", VAE_AREA)
    monkeypatch.setattr(pipeline_qwenimage_edit_plus, "CONDITION_IMAGE_SIZE", VL_AREA)
    pipe = QwenImageEditPlusPipeline.from_pretrained(
        str(folder), processor=reference_processor(folder), dtype=torch.float32
    )
    pipe.set_progress_bar_config(disable=True)
    out = pipe(
        image=[Image.open(p).convert("RGB") for p in images],
        prompt=PROMPT,
        negative_prompt=NEGATIVE,
        true_cfg_scale=cfg,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=steps,
        generator=torch.Generator("cpu").manual_seed(42),
    ).images[0]
    return np.asarray(out.convert("RGB"))


@pytest.mark.slow  # loads the tiny model three times (~10 s)
def test_cli_edit_matches_the_plus_pipeline(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = picture(tmp_path / "in.png")
    a = ours(folder, tmp_path / "out", image)
    b = theirs_plus(folder, [image], monkeypatch)
    assert a.shape == b.shape == (HEIGHT, WIDTH, 3)
    assert b.std() > 5  # a real picture, not a flat one both sides could agree on by accident
    # Same ops on the same CPU kernels; 1 of 255 allows a float32 sum order difference at a rounding edge.
    diff = np.abs(a.astype(int) - b.astype(int)).max()
    print(f"qwenimage edit plus parity: max uint8 difference {diff}")
    assert diff <= 1
    # The picture mattered: another input picture gives another output.
    other = ours(folder, tmp_path / "other", picture(tmp_path / "b.png", seed=5, size=(90, 60)))
    assert not np.array_equal(a, other)


folder_2511 = demo_folder("tiny-qwenimage-edit-2511")


@pytest.mark.slow  # the folder fixture builds the tiny model (~2 s)
def test_our_processor_inputs_are_transformers_processors(folder: Path, tmp_path: Path) -> None:
    """`edit_inputs` expands the picture slots and cuts patches itself; the real `Qwen2VLProcessor` (with the
    folder's image processor and tokenizer) must give the same ids, mask, patches and grids, for one to three
    pictures of different shapes. The pipeline here reads pictures with the PIL image processor too."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from nodes.png import pil_to_tensor
    from pipelines.diffusion.qwenimage_edit_text import PICTURE_PROMPT, PLUS_TEMPLATE, edit_inputs

    processor = reference_processor(folder)
    assert isinstance(processor.image_processor, Qwen2VLImageProcessorPil)
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(folder / "processor"))
    tokenizer = AutoTokenizer.from_pretrained(str(folder / "processor"))
    sizes = [(60, 90), (90, 60), (77, 77)]
    pictures = [Image.open(picture(tmp_path / f"{i}.png", seed=i, size=s)) for i, s in enumerate(sizes)]
    for n in (1, 2, 3):
        ours_in = edit_inputs(
            image_processor,
            tokenizer,
            PROMPT,
            [pil_to_tensor(p) for p in pictures[:n]],
            plus=True,
            vae_area=VAE_AREA,
            vl_area=VL_AREA,
            multiple=8,
        )
        # What the pipeline hands the processor: its resized pictures and its text.
        from diffusers.image_processor import VaeImageProcessor

        from pipelines.diffusion.qwenimage_edit_text import picture_sizes

        resize = VaeImageProcessor(vae_scale_factor=8).resize
        resized = [resize(p, *reversed(picture_sizes(p.width, p.height, VL_AREA))) for p in pictures[:n]]
        text = PLUS_TEMPLATE.format("".join(PICTURE_PROMPT.format(i + 1) for i in range(n)) + PROMPT)
        theirs_in = processor(text=[text], images=resized, padding=True, return_tensors="pt")
        assert torch.equal(ours_in.input_ids, theirs_in["input_ids"])
        assert torch.equal(ours_in.attention_mask, theirs_in["attention_mask"])
        assert torch.equal(ours_in.pixel_values, theirs_in["pixel_values"])
        assert torch.equal(ours_in.image_grid_thw, theirs_in["image_grid_thw"])
        assert len(ours_in.vae_pixels) == n


@pytest.mark.slow  # loads the tiny model twice
def test_three_pictures_match_the_plus_pipeline(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """image1..image3 = the pipeline's `image=[a, b, c]`: three 'Picture n:' slots, three references."""
    import json

    images = [
        picture(tmp_path / f"{i}.png", seed=i, size=s) for i, s in enumerate([(60, 90), (90, 60), (64, 64)])
    ]
    workflow = json.loads(EDIT.read_text())
    for i, path in enumerate(images[1:], start=2):
        workflow["nodes"][f"image{i}"] = {"type": "LoadImage", "params": {"path": str(path)}, "inputs": {}}
        for side in ("positive", "negative"):
            workflow["nodes"][side]["inputs"][f"image{i}"] = [f"image{i}", "image"]
    edit = tmp_path / "edit3.json"
    edit.write_text(json.dumps(workflow))
    a = ours(folder, tmp_path / "out", images[0], workflow=edit)
    b = theirs_plus(folder, images, monkeypatch)
    diff = np.abs(a.astype(int) - b.astype(int)).max()  # 1 of 255: a float32 rounding edge, as above
    print(f"qwenimage edit plus, 3 pictures: max uint8 difference {diff}")
    assert diff <= 1


@pytest.mark.slow  # loads the tiny model twice
def test_the_first_release_node_matches_the_edit_pipeline(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TextEncodeQwenImageEdit = `QwenImageEditPipeline`: its template (one picture slot, no 'Picture 1:'),
    the VL model shown the VAE-sized picture. Its area is a literal in `__call__` (1024 * 1024): the module's
    `calculate_dimensions` is given the tiny area instead."""
    import json

    from diffusers import QwenImageEditPipeline
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit

    workflow = json.loads(EDIT.read_text())
    for side in ("positive", "negative"):
        node = workflow["nodes"][side]
        node["type"] = "TextEncodeQwenImageEdit"
        node["inputs"]["image"] = node["inputs"].pop("image1")
        node["params"].pop("vl_pixels")
    edit = tmp_path / "edit1.json"
    edit.write_text(json.dumps(workflow))
    image = picture(tmp_path / "in.png")
    a = ours(folder, tmp_path / "out", image, workflow=edit, vl=False)

    original = pipeline_qwenimage_edit.calculate_dimensions
    monkeypatch.setattr(
        pipeline_qwenimage_edit, "calculate_dimensions", lambda area, ratio: original(VAE_AREA, ratio)
    )
    pipe = QwenImageEditPipeline.from_pretrained(
        str(folder), processor=reference_processor(folder), dtype=torch.float32
    )
    pipe.set_progress_bar_config(disable=True)
    b = pipe(
        image=Image.open(image).convert("RGB"),
        prompt=PROMPT,
        negative_prompt=NEGATIVE,
        true_cfg_scale=4.0,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=3,
        generator=torch.Generator("cpu").manual_seed(42),
    ).images[0]
    b = np.asarray(b.convert("RGB"))
    diff = np.abs(a.astype(int) - b.astype(int)).max()  # 1 of 255: a float32 rounding edge, as above
    print(f"qwenimage edit (first release) parity: max uint8 difference {diff}")
    assert b.std() > 5 and diff <= 1


@pytest.mark.slow  # loads the tiny model twice
def test_2511_matches_the_plus_pipeline(
    folder_2511: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Edit 2511's transformer (`zero_cond_t`: reference tokens modulated at timestep 0) through the same
    graph; its picture differs from 2509's, whose weights are the same."""
    image = picture(tmp_path / "in.png")
    a = ours(folder_2511, tmp_path / "out", image)
    b = theirs_plus(folder_2511, [image], monkeypatch)
    diff = np.abs(a.astype(int) - b.astype(int)).max()  # 1 of 255: a float32 rounding edge, as above
    print(f"qwenimage edit 2511 parity: max uint8 difference {diff}")
    assert b.std() > 5 and diff <= 1


@pytest.mark.slow  # two runs of the tiny model
def test_stream_offload_gives_the_same_edit(folder: Path, tmp_path: Path) -> None:
    image = picture(tmp_path / "in.png")
    plain = ours(folder, tmp_path / "none", image, extra=("--offload", "none"))
    streamed = ours(folder, tmp_path / "stream", image, extra=("--offload", "stream", "--ram-budget", "2GiB"))
    assert np.array_equal(plain, streamed)


def test_edit_folders_are_their_own_family() -> None:
    from pipelines.diffusion.families import FAMILIES, UnsupportedModelError, family_for_pipeline_class
    from pipelines.diffusion.family_detect import family_from_class_name

    assert family_from_class_name("QwenImageEditPlusPipeline") == "qwenimage_edit"
    assert family_from_class_name("QwenImageEditPipeline") == "qwenimage_edit"
    assert family_from_class_name("QwenImagePipeline") == "qwenimage"
    assert family_for_pipeline_class("QwenImageEditPlusPipeline") is FAMILIES["qwenimage_edit"]
    with pytest.raises(UnsupportedModelError, match="QwenImageEditInpaintPipeline"):
        family_for_pipeline_class("QwenImageEditInpaintPipeline")


@pytest.mark.slow  # loads a model
def test_an_edit_node_on_a_txt2img_model_or_without_a_picture_is_refused(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    workflow = json.loads(EDIT.read_text())
    del workflow["nodes"]["positive"]["inputs"]["image1"]
    edit = tmp_path / "nopicture.json"
    edit.write_text(json.dumps(workflow))
    args = ["--run", str(edit), "--out", str(tmp_path / "o"), "--quiet", "--set", f"load.path={folder}"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "wire at least one picture" in err and "Traceback" not in err

    qwenimage = copy_demo_model("tiny-qwenimage", tmp_path / "tiny-qwenimage")
    args = ["--run", str(EDIT), "--out", str(tmp_path / "p"), "--quiet", "--set", f"load.path={qwenimage}"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "not a Qwen-Image-Edit model" in err and "Traceback" not in err


# (output px, reference pictures' px, caption tokens): the pipelines' 1024 x 1024 references, one to three.
EDIT_CASES = [
    ((1024, 1024), [(1024, 1024)], 300),
    ((1024, 1024), [(1024, 1024)] * 3, 100),
    ((768, 512), [(512, 768)], 50),
    ((512, 512), [(1024, 1024)], 500),
]


@pytest.mark.slow  # 0.2-0.7 s a case on the meta device
@pytest.mark.parametrize("zero_cond_t", [False, True], ids=["2509", "2511"])
@pytest.mark.parametrize(("size", "refs", "caption"), EDIT_CASES)
def test_working_memory_formula_covers_the_full_size_edit_transformer(
    zero_cond_t: bool, size: tuple[int, int], refs: list[tuple[int, int]], caption: int
) -> None:
    """The sampler's reservation with reference tokens against what the full-width transformer keeps alive
    (meta device, tests/live_tensors.py; two blocks: the peak is within one)."""
    from diffusers import QwenImageTransformer2DModel

    from pipelines.diffusion.families import FAMILIES
    from pipelines.diffusion.qwenimage_working import qwenimage_working_bytes
    from pipelines.diffusion.values import DenoiserRef
    from tests.live_tensors import live_tensor_peak

    meta = torch.device("meta")
    with meta:
        model = QwenImageTransformer2DModel(num_layers=2, zero_cond_t=zero_cond_t)
    h, w = size[0] // 8, size[1] // 8  # latent pixels (the VAE's 8)
    grids = [(rh // 16, rw // 16) for rh, rw in refs]  # 8 px per latent, 2x2 packing
    references = sum(a * b for a, b in grids)
    x = torch.zeros(1, (h // 2) * (w // 2) + references, 64, device=meta)
    embeds = torch.zeros(1, caption, 3584, device=meta)
    shapes = [[(1, h // 2, w // 2), *[(1, a, b) for a, b in grids]]]
    measured = live_tensor_peak(
        model,
        lambda: model(
            hidden_states=x,
            encoder_hidden_states=embeds,
            timestep=torch.zeros(1, device=meta),
            img_shapes=shapes,
            return_dict=False,
        ),
    )
    ref = DenoiserRef(None, FAMILIES["qwenimage_edit"], dict(model.config), {}, torch.float32)  # type: ignore[arg-type]
    formula = qwenimage_working_bytes(ref, h, w, 1, caption, references)
    # Never below what is alive (a budget would be overrun), at most 15% above (streaming keeps fewer blocks).
    print(
        f"qwenimage edit working {size} {len(refs)} refs zero_cond_t={zero_cond_t}: {formula / measured:.3f}x"
    )
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


# Patch grids (h, w in 14 px patches) of one prompt's pictures: Plus's 384 x 384 (392 px: 28 x 28), three of
# them, a 2:3 one, and the first release's 1024 x 1024 (1036 px: 74 x 74), which the VL model sees whole.
VISION_CASES = [[(28, 28)], [(28, 28)] * 3, [(24, 36)], [(74, 74)]]


@pytest.mark.slow  # 0.3-1 s a case on the meta device
@pytest.mark.parametrize("grids", VISION_CASES, ids=["384", "3x384", "2to3", "1024"])
def test_working_memory_formula_covers_the_full_size_vision_tower(grids: list[tuple[int, int]]) -> None:
    """Qwen2.5-VL-7B's vision tower (published widths; 8 of its 32 blocks, the peak is within one) over one
    prompt's pictures, on the meta device. The rotary tables are built from `grid_thw`, a CPU tensor in the
    model's own code; they are moved to the meta device here (the only change) so the call runs."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl

    from pipelines.diffusion.qwenimage_edit_working import vision_working_bytes
    from tests.live_tensors import live_tensor_peak

    text = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=1, num_attention_heads=28)
    text |= dict(num_key_value_heads=4, vocab_size=152064)
    vision = dict(depth=8, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584)
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, vocab_size=152064, attn_implementation="sdpa"
    )
    meta = torch.device("meta")
    with meta:
        model = Qwen2_5_VLForConditionalGeneration(config)
    visual = model.model.visual
    rotary = modeling_qwen2_5_vl.Qwen2_5_VLVisionRotaryEmbedding.forward
    grid = torch.tensor([[1, h, w] for h, w in grids])
    patches = sum(h * w for h, w in grids)
    pixels = torch.zeros(patches, 3 * 2 * 14 * 14, device=meta)  # channels x frames x 14 x 14
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            modeling_qwen2_5_vl.Qwen2_5_VLVisionRotaryEmbedding,
            "forward",
            lambda self, x, positions: rotary(self, x, positions.to(x.device)),
        )
        measured = live_tensor_peak(visual, lambda: visual(pixels, grid_thw=grid))
    formula = vision_working_bytes(config.vision_config.to_dict(), patches, torch.float32)
    print(f"qwenimage edit vision working {grids}: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


def test_the_tiny_tokenizer_splits_the_edit_system_turn_as_qwen_does() -> None:
    """The edit pipelines drop the first 64 tokens (Qwen's tokenizer's count for their system turn): the
    tiny tokenizer must agree, or the parity above would compare embeddings cut mid-instruction."""
    from pipelines.diffusion.demo_qwenimage_edit import tiny_qwenimage_edit_tokenizer
    from pipelines.diffusion.qwenimage_edit_text import EDIT_TEMPLATE_START, PLUS_TEMPLATE

    tokenizer = tiny_qwenimage_edit_tokenizer()
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(PLUS_TEMPLATE.format(PROMPT)).input_ids)
    assert tokens[EDIT_TEMPLATE_START - 3 : EDIT_TEMPLATE_START] == ["<|im_start|>", "user", "Ċ"]


@pytest.mark.slow  # loads the tiny text encoder twice
def test_the_text_encoder_streams_its_vision_and_language_blocks_with_the_same_embeddings(
    folder: Path, tmp_path: Path
) -> None:
    """In a budget that holds the edit prompt's working memory, the weights outside the declared blocks and
    one block (not the whole encoder), `stream` moves the vision tower's and the language model's blocks in
    per call, and the picture prompt's embeddings and references are unchanged."""
    import json

    from safetensors import safe_open
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from memory import MemoryConfig, MemoryManager
    from nodes.png import pil_to_tensor
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.qwenimage_edit_text import edit_inputs, encode_qwenimage_edit
    from pipelines.diffusion.qwenimage_edit_working import edit_text_working_bytes

    image = pil_to_tensor(Image.open(picture(tmp_path / "in.png")))

    def encode(policy: str, budget: str | None = None) -> tuple[Any, list]:
        # A fresh data dir: no peak learned by the runs above replaces the formula the budget is built on.
        config = MemoryConfig(device="cpu", policy=policy, ram_budget=budget, data_dir=tmp_path / policy)
        with MemoryManager(config) as mm:
            model = load_model(mm, folder)
            cond = encode_qwenimage_edit(
                mm,
                model.text_encoder,
                PROMPT,
                [image],
                vae=None,
                plus=True,
                vae_area=VAE_AREA,
                vl_area=VL_AREA,
            )
            return cond, mm.report()["transfers"]

    whole, _ = encode("none")
    weights = folder / "text_encoder" / "model.safetensors"
    with safe_open(str(weights), framework="pt") as f:
        nbytes = {k: 4 * int(np.prod(f.get_slice(k).get_shape())) for k in f.keys()}  # float32
    in_block = [f"{kind}.{i}." for kind in ("layers", "blocks") for i in range(2)]
    block = max(sum(n for k, n in nbytes.items() if part in k) for part in in_block)
    fixed = sum(n for k, n in nbytes.items() if not any(part in k for part in in_block))
    # The formula the encoder reserves for this prompt (what the manager budgets with).
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(folder / "processor"))
    tokenizer = AutoTokenizer.from_pretrained(str(folder / "processor"))
    inputs = edit_inputs(
        image_processor, tokenizer, PROMPT, [image], plus=True, vae_area=VAE_AREA, vl_area=VL_AREA, multiple=8
    )
    config = json.loads((folder / "text_encoder" / "config.json").read_text())
    working = edit_text_working_bytes(
        config, inputs.input_ids.shape[1], inputs.pixel_values.shape[0], torch.float32
    )
    budget = working + fixed + block + 2048  # 2 KiB for the small tensors the ledger counts beside weights
    assert budget < working + sum(nbytes.values())  # the whole encoder would not fit beside its working
    streamed, transfers = encode("stream", str(budget))
    assert transfers and transfers[0]["component"] == "text_encoder (streamed)"
    assert torch.equal(whole.embeds, streamed.embeds)
