"""File > Import of a ComfyUI file (issue 32 item 3): a dismissable summary with what was mapped, what differs,
every missing model file with the folders searched and how to add a models folder, the same lines `app
import` prints; the affected nodes are marked before Run, and editing a missing name takes its mark away."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.import_summary import ADD_ROOT_HINT
from app.importing import import_file
from pipelines.models_library import ModelsLibrary
from tests.gui_support import make_window

REPO = Path(__file__).resolve().parent.parent
API = REPO / "tests" / "data" / "comfy" / "sd15_default.api.json"


@pytest.mark.slow  # a window and an import: ~1.5 s here
def test_the_summary_names_missing_models_and_differences_and_marks_them(
    qtbot, tmp_path: Path, registry
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    prompt = json.loads(API.read_text())
    prompt["3"]["inputs"]["sampler_name"] = "dpmpp_2m_sde_gpu"  # runs as dpmpp_2m_sde: a note on what differs
    source = tmp_path / "sd15.api.json"
    source.write_text(json.dumps(prompt))
    window = make_window(qtbot, tmp_path, registry)
    window.library = ModelsLibrary([models])
    assert window.import_path(source, import_file)
    banner = window.import_marks.banner
    assert banner.isVisible() and banner.title.text() == "Imported sd15.api.json"
    body = banner.body.text()
    assert "7 node(s) mapped (1 approximated)" in body  # the sampler that runs as another is counted
    assert (
        "missing model: node load_checkpoint, field &#x27;path&#x27;: model &#x27;v1-5-pruned-emaonly-fp16.safetensors&#x27; not found"
        in body
    )
    assert f"searched: {models}" in body  # the folders searched
    assert "app models add-root DIR" in body and "File &gt; Settings &gt; Models folder" in body
    assert (
        "approximated: node ksampler (KSampler): sampler &#x27;dpmpp_2m_sde_gpu&#x27; runs as &#x27;dpmpp_2m_sde&#x27;"
        in body
    )
    assert body.count("dpmpp_2m_sde_gpu") == 1  # said once, not again as a node note
    assert banner.settings_button.isVisible()
    # The nodes are marked before any Run: the loader in red, the sampler in amber, each saying why.
    loader, sampler = window.scene.node_items["load_checkpoint"], window.scene.node_items["ksampler"]
    assert loader.badge()[0] == "✕ error" and "missing model: path: model" in loader.toolTip()
    assert sampler.badge()[0] == "≈ differs" and "runs as" in sampler.toolTip()
    # Dismiss hides the summary; the marks stay until the name is fixed.
    banner.dismiss_button.click()
    assert not banner.isVisible() and window.scene.run_states["load_checkpoint"].status == "error"
    window.model.set_param("load_checkpoint", "path", "builtin:shapes-sd")
    assert window.scene.run_states["load_checkpoint"].status == ""
    assert window.scene.run_states["ksampler"].status == "warning"


@pytest.mark.slow
def test_the_summary_lines_are_app_imports(qtbot, tmp_path: Path, registry, capsys) -> None:
    from app.main import main

    models = tmp_path / "models"
    models.mkdir()
    assert main(["import", str(API), "-o", str(tmp_path / "out.json"), "--models-dir", str(models)]) == 0
    printed = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    window = make_window(qtbot, tmp_path, registry)
    window.library = ModelsLibrary([models])
    assert window.import_path(API, import_file)
    lines = window.import_marks.report.lines
    assert [line for line in printed if line.startswith(("summary:", "missing model"))] == [
        line
        for line in lines
        if line.startswith(("summary:", "missing model")) and "File > Settings" not in line
    ]
    assert ADD_ROOT_HINT in " ".join(lines)
