"""Batch Images and Image From Batch (nodes/image_batch.py) and their ComfyUI counterparts.

What a user checks: pictures of different sizes join one batch at the first picture's size (cut to its
aspect around the middle, as ComfyUI's `batch_images` does), an RGB picture gains an opaque alpha when
another has one, a slice comes out of a batch with its bounds clamped, and ComfyUI's BatchImagesNode
(inputs `images.image0`, `images.image2`, ...) imports in the order of its numbers and exports back.
"""

from __future__ import annotations

import pytest
import torch

from nodes.comfy.export import export_api
from nodes.comfy.sources import import_comfy_data
from nodes.image_batch import batch_images
from nodes.workflow import workflow_from_dict
from tests.comfy_ids import by_comfy_id


def test_pictures_take_the_first_ones_size_cut_around_the_middle() -> None:
    first = torch.rand(1, 8, 8, 3)
    wide = torch.zeros(2, 8, 16, 3)
    wide[:, :, 4:12] = 1.0  # the middle square of a 2:1 picture is white, its sides black
    batch = batch_images([first, wide])
    assert batch.shape == (3, 8, 8, 3)
    assert torch.equal(batch[0], first[0])
    # The 8x16 picture is cut to its middle 8x8 (all white) before resizing, so nothing black is left.
    assert torch.allclose(batch[1:], torch.ones(2, 8, 8, 3))
    with pytest.raises(ValueError, match="image0"):
        batch_images([])


def test_rgb_gains_an_opaque_alpha_when_another_picture_has_one() -> None:
    batch = batch_images([torch.zeros(1, 4, 4, 3), torch.full((1, 4, 4, 4), 0.5)])
    assert batch.shape == (2, 4, 4, 4)
    assert torch.equal(batch[0, ..., 3], torch.ones(4, 4)) and torch.equal(
        batch[1], torch.full((4, 4, 4), 0.5)
    )


def test_image_from_batch_clamps_to_the_batch(registry) -> None:
    images = torch.arange(5, dtype=torch.float32).reshape(5, 1, 1, 1).expand(5, 2, 2, 3)
    run = registry["ImageFromBatch"].run
    assert run(None, image=images, batch_index=1, length=2)["image"][:, 0, 0, 0].tolist() == [1.0, 2.0]
    assert run(None, image=images, batch_index=9, length=3)["image"][:, 0, 0, 0].tolist() == [4.0]


def test_comfyuis_batch_images_node_imports_in_number_order_and_exports_back(registry) -> None:
    prompt = {
        "1": {"class_type": "LoadImage", "inputs": {"image": "a.png"}},
        "2": {"class_type": "LoadImage", "inputs": {"image": "b.png"}},
        "3": {
            "class_type": "BatchImagesNode",
            "inputs": {"images.image2": ["2", 0], "images.image0": ["1", 0]},
        },
        "4": {"class_type": "ImageFromBatch", "inputs": {"image": ["3", 0], "batch_index": 1, "length": 1}},
        "5": {"class_type": "PreviewImage", "inputs": {"images": ["4", 0]}},
    }
    result = import_comfy_data(prompt, registry, "batch.json", title="batch")
    assert not result.unsupported
    nodes = by_comfy_id(result.workflow)
    assert nodes["3"]["type"] == "BatchImages"
    assert nodes["3"]["inputs"] == {"image0": ["1", "image"], "image1": ["2", "image"]}
    assert nodes["4"]["params"] == {"batch_index": 1, "length": 1}
    exported = export_api(workflow_from_dict(result.workflow, registry), registry)
    batch = next(n for n in exported.values() if n["class_type"] == "BatchImagesNode")
    assert sorted(batch["inputs"]) == ["images.image0", "images.image1"]
