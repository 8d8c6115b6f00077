"""ComfyUI's published image templates run here: each family's template, imported against a ComfyUI models
folder holding tiny demo models under the template's own file names (`write_comfy_files`), passes `app check`
and gives the picture of our native graph (the same workflow reading the demo's diffusers folder) with the same
settings. Skipped without ComfyUI's template package (`pip install comfyui-workflow-templates-json`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.diffusion.comfy_layouts.writer import COMFY_FILES
from tests.comfy_layout_support import comfy_fixture, run_graph
from tests.template_runs import import_template, max_diff, native_graph

pytestmark = pytest.mark.slow  # each case builds a tiny model and runs two graphs (a few seconds)

# template -> (family, the settings both runs get). Tiny sizes and 2-3 steps keep each run to seconds; odd
# sizes on purpose (nothing assumes square).
CASES = {
    "image_z_image_turbo": (
        "zimage",
        {
            "empty_sd3_latent_image.width": 40,
            "empty_sd3_latent_image.height": 56,
            "ksampler.steps": 3,
            "ksampler.seed": 42,
        },
    ),
}


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """family -> (the demo's diffusers folder, a ComfyUI models folder with its files), built once."""
    out = {}
    for family in sorted({family for family, _ in CASES.values()}):
        folder, root = comfy_fixture(family, tmp_path_factory.mktemp(family))
        out[family] = (folder, root / "models")
    return out


@pytest.mark.parametrize("template", sorted(CASES))
def test_template_on_its_own_file_names_gives_the_native_picture(
    template: str, fixtures: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    family, sets = CASES[template]
    folder, models = fixtures[family]
    names = COMFY_FILES[family]
    for sub, name in (("diffusion_models", names.transformer), ("text_encoders", names.text_encoder)):
        assert (models / sub / name).is_file()  # the names the template asks for, nothing renamed
    workflow = import_template(template, models, tmp_path / f"{template}.nodeloom.json")
    ours = run_graph(
        tmp_path / f"{template}.nodeloom.json", tmp_path / "files", sets, ("--models-dir", str(models))
    )
    native = run_graph(native_graph(workflow, folder), tmp_path / "native", sets)
    assert native[0].std() > 5  # a real picture, not a flat one both could agree on by accident
    # The same float32 weights read from ComfyUI's files instead of the folder: identical pictures were seen;
    # 1/255 allows one rounding edge in the decode.
    assert max_diff(ours, native) <= 1
