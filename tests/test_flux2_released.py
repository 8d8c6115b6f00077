"""The shipped FLUX.2 [klein] 4B / 9B config folders: written by their writer, and at the published sizes.

May import: stdlib, pytest, torch, diffusers, pipelines.diffusion.comfy_layouts.flux2_released, pipelines.paths.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipelines.diffusion.comfy_layouts.flux2_released import write_flux2_released
from pipelines.paths import RESOURCES_DIR


@pytest.mark.slow  # imports diffusers for the class defaults (~1-6 s on the shared box)
def test_shipped_folders_are_what_the_writer_writes(tmp_path: Path) -> None:
    """resources/configs/flux2-klein-* are the writer's output as they are (no hand edit drifted from it)."""
    for written in write_flux2_released(tmp_path):
        files = sorted(p.relative_to(written) for p in written.rglob("*.json"))
        assert files, written
        for rel in files:
            shipped = RESOURCES_DIR / "configs" / written.name / rel
            assert shipped.read_text(encoding="utf-8") == (written / rel).read_text(encoding="utf-8"), shipped


@pytest.mark.slow  # a 4B and a 9B transformer on the meta device (<0.5 s each once diffusers is in)
@pytest.mark.parametrize(("name", "billions"), [("flux2-klein-4b", 4.0), ("flux2-klein-9b", 9.0)])
def test_transformer_has_the_published_size_and_reads_three_text_layers(name: str, billions: float) -> None:
    """The names say 4B and 9B: the transformer built from the folder is that size (within 0.2B, the names
    are rounded), and its text input is three of the folder's text encoder's hidden states side by side."""
    from diffusers import Flux2Transformer2DModel

    folder = RESOURCES_DIR / "configs" / name
    config = json.loads((folder / "transformer/config.json").read_text(encoding="utf-8"))
    text = json.loads((folder / "text_encoder/config.json").read_text(encoding="utf-8"))
    with torch.device("meta"):
        model = Flux2Transformer2DModel.from_config(config)
    params = sum(p.numel() for p in model.parameters()) / 1e9
    assert abs(params - billions) < 0.2, f"{name}: {params:.2f}B"
    assert config["joint_attention_dim"] == 3 * text["hidden_size"]
    assert not config["guidance_embeds"]  # Klein has no guidance embedding (FLUX.2 [dev] has)
