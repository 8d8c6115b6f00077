"""One family registry: every detector answers with its ids, and the facts it declares agree with what
each family's own classes say (so a new family is one declaration, not edits in five places)."""

from __future__ import annotations

import pytest

from pipelines.diffusion.families import CHECKPOINT_LAYOUTS, FAMILIES
from pipelines.diffusion.family_detect import (
    family_from_class_name,
    family_from_file_name,
    family_from_keys,
    family_from_text_encoders,
)
from pipelines.diffusion.single_file import CONFIG_DIRS
from pipelines.quant.split_files import SPLIT_CONFIG_DIRS


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_diffusers_folder_of_each_family_is_detected_as_that_family(name: str) -> None:
    for class_name in FAMILIES[name].pipeline_classes:
        assert family_from_class_name(class_name) == name


# Families whose encoders are all CLIP/T5 (Z-Image's Qwen3 loads from its folder only: no split files).
@pytest.mark.parametrize("name", [n for n, f in FAMILIES.items() if f.split_text_encoders])
def test_a_familys_text_encoder_files_name_that_family_only(name: str) -> None:
    clips, t5s = FAMILIES[name].text_encoder_files
    assert family_from_text_encoders(clips, t5s) is FAMILIES[name]


def test_checkpoint_layouts_are_variants_of_registered_families() -> None:
    for layout in CHECKPOINT_LAYOUTS.values():
        assert FAMILIES[layout.family.name] is layout.family
        assert len(layout.text_encoder_prefixes) == len(layout.family.text_encoders)
    # SD 2.x ships no config folder: only the layouts that do have one.
    # FLUX.1's and SD3.5's one-file checkpoints read the shipped flux/ and sd3.5-large/ folders.
    assert set(CONFIG_DIRS) == {"sd1", "sdxl", "flux1", "sd3"} and all(
        p.is_dir() for p in CONFIG_DIRS.values()
    )
    assert set(SPLIT_CONFIG_DIRS) == {"sd", "sdxl", "flux"} and all(
        p.is_dir() for p in SPLIT_CONFIG_DIRS.values()
    )


def test_file_names_and_headers_answer_with_registry_ids() -> None:
    assert family_from_file_name("flux1-dev-fp8.safetensors") == "flux"
    assert family_from_file_name("sd3.5_large.safetensors") == "sd3"
    assert family_from_file_name("sd_xl_base_1.0.safetensors") == "sdxl"
    assert family_from_file_name("v1-5-pruned.safetensors") is None
    assert (
        family_from_keys(["model.diffusion_model.input_blocks.0.0.weight", "cond_stage_model.x"], {}) == "sd"
    )
    assert family_from_keys(["double_blocks.0.img_attn.qkv.weight"], {}) == "flux"
    assert family_from_keys(["text_model.encoder.layers.0.mlp.fc1.weight"], {}) == "text_encoder"
