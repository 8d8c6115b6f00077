"""MiniMax H3 reference to video's pictures without a model: the sizes ComfyUI's node encodes them at, the
refusals, and the packed layout against diffusers' own `build_ref2va_packed_sequence`.

The sizes are ComfyUI's `_build_ref_blocks` (comfy_extras/nodes_minimax_h3.py): 'match' scales a picture
down, keeping its aspect, to the generation's pixel area; 'max' down to a 2048 short edge; both never upscale
and round each side to the canvas multiple (32 for the release), at least one multiple.
"""

from __future__ import annotations

import pytest
import torch

from pipelines.diffusion.minimax_refs import build_ref2va_packed_sequence, prepare_reference, reference_size


@pytest.mark.parametrize(
    ("picture", "mode", "expected"),
    [
        ((1344, 768), "match", (1344, 768)),  # the video's own size: left alone
        ((2688, 1536), "match", (1344, 768)),  # 4x the area: halved
        ((3000, 2000), "match", (1248, 832)),  # sqrt(1032192 / 6e6) = 0.4148: 1244.4 x 829.6, rounded to 32
        ((500, 400), "match", (512, 384)),  # smaller: never upscaled, only rounded (15.6 -> 16, 12.5 -> 12)
        ((4096, 3000), "max", (2784, 2048)),  # short edge 3000 -> 2048: 2796.1 rounds to 2784
        ((1000, 800), "max", (992, 800)),  # under 2048: kept, rounded (31.25 -> 31, 25)
        ((10, 10), "max", (32, 32)),  # at least one multiple
    ],
)
def test_reference_sizes_are_comfyuis(picture, mode, expected) -> None:
    assert reference_size(*picture, 1344, 768, 32, mode) == expected


def test_a_tiny_canvas_multiple_and_the_refusals() -> None:
    # the template test's pictures, at the tiny VAE's canvas multiple 16
    assert reference_size(60, 40, 32, 32, 16, "match") == (32, 32)
    with pytest.raises(ValueError, match="ref_image_size"):
        reference_size(60, 40, 32, 32, 16, "huge")
    wide = torch.rand(1, 10, 50, 3)  # 5:1
    with pytest.raises(ValueError, match="within 1:4 and 4:1"):
        prepare_reference(wide, 32, 32, 16, "max")
    picture = prepare_reference(torch.rand(1, 40, 60, 3), 32, 32, 16, "match")
    assert picture.size == (32, 32)  # 60 x 40 scaled to 1024 px area: 39 x 26, rounded to 16


def test_the_layout_is_diffusers_ref2va_layout() -> None:
    """Two picture references of other sizes than the target, text rows with a vision block: the positions
    (float64, exact), tags, row indices and reference row count equal diffusers' static method's."""
    from diffusers.modular_pipelines.minimax_h3.before_denoise import MiniMaxH3Ref2VAPrepareLayoutStep
    from diffusers.modular_pipelines.minimax_h3.references import MiniMaxH3ImageReference

    tags = torch.tensor([1, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1])
    latents = [torch.zeros(1, 8, 1, 6, 4), torch.zeros(1, 8, 1, 4, 8)]
    patch = (1, 2, 2)
    theirs = MiniMaxH3Ref2VAPrepareLayoutStep.build_ref2va_packed_sequence(
        tags,
        [MiniMaxH3ImageReference(image=None), MiniMaxH3ImageReference(image=None)],
        latents,
        [],
        32,
        4,
        6,
        207,
        patch,
        2,
        2,
        0,
    )
    ours = build_ref2va_packed_sequence(tags, ((1, 6, 4), (1, 4, 8)), 32, 4, 6, 207, patch)
    assert torch.equal(ours.position_ids, theirs[0]) and ours.position_ids.dtype == torch.float64
    for mine, other in zip(
        (ours.token_tags, ours.video_indices, ours.audio_indices, ours.text_indices), theirs[1:5], strict=True
    ):
        assert torch.equal(mine, other)
    assert ours.condition_rows == theirs[5] == 6 * 4 // 4 + 4 * 8 // 4 and theirs[6] == 0
