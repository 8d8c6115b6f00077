"""The editor's Run applies the same rule as `app --run`: a name an imported ComfyUI file gave stays inside the
models folders, while a path the user sets in the editor is theirs, kept and shown as typed."""

from __future__ import annotations

import json
from pathlib import Path

from app.importing import import_file
from nodes.model_names import confined_fields
from tests import gui_support

DATA = Path(__file__).resolve().parent / "data" / "comfy"


def test_the_editor_refuses_an_imported_absolute_path_and_keeps_the_users_own(
    qtbot, tmp_path: Path, registry
) -> None:
    prompt = json.loads((DATA / "sd15_default.api.json").read_text())
    prompt["4"]["inputs"]["ckpt_name"] = "/etc/passwd"
    source = tmp_path / "comfy.json"
    source.write_text(json.dumps(prompt))
    window = gui_support.make_window(qtbot, tmp_path, registry, for_runs=True)
    assert window.import_path(source, import_file)
    assert not window.run_workflow()
    assert not window.runner.running
    text = window.problem_dialog.informativeText()
    assert "load_checkpoint.path: '/etc/passwd' is an absolute path" in text
    # The user types a path of their own: no longer the imported name, so no longer confined.
    mine = str(tmp_path / "my models" / "model.safetensors")
    window.model.set_param("load_checkpoint", "path", mine)
    wf = window.model.to_workflow()
    assert wf.nodes["load_checkpoint"].params["path"] == mine  # kept whole, as typed
    assert ("load_checkpoint", "path") not in confined_fields(wf)
