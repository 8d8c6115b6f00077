"""A bypassed node that has nothing of the right type to pass on: the run is refused with a message about
the bypass, not about a wire the user can see ("required input 'image' is not connected")."""

from __future__ import annotations

import json
from pathlib import Path

from app.main import main
from nodes.modes import runnable
from nodes.registry import default_registry
from nodes.workflow import workflow_from_dict

TXT2IMG = Path(__file__).resolve().parent.parent / "resources/workflows/txt2img.json"


def test_a_bypass_with_nothing_to_pass_on_names_the_bypassed_node(tmp_path: Path, capsys) -> None:
    data = json.loads(TXT2IMG.read_text())
    data["ui"].setdefault("nodes", {}).setdefault("decode", {})["mode"] = (
        "bypass"  # VAE Decode: no IMAGE input
    )
    registry = default_registry()
    _, problems = runnable(workflow_from_dict(data, registry), registry)
    (problem,) = problems
    assert (problem.node, problem.field) == ("save", "image")
    assert "'decode' (VAE Decode), which is bypassed and has no IMAGE input to pass on" in problem.reason
    assert "mute 'decode' instead" in problem.reason

    path = tmp_path / "bypassed.json"
    path.write_text(json.dumps(data))
    assert main(["--run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "which is bypassed" in err and "not connected" not in err

    data["ui"]["nodes"]["decode"]["mode"] = "mute"  # what the message suggests: the run goes, without saving
    assert runnable(workflow_from_dict(data, registry), registry)[1] == []


def test_the_editor_refuses_it_the_same_way_and_the_marks_go_with_the_next_edit(
    qtbot, tmp_path: Path
) -> None:
    from nodes.registry import default_registry as registry_for_gui
    from nodes.workflow import load_workflow
    from tests import gui_support

    registry = registry_for_gui(entry_point_packs=False)
    window = gui_support.make_window(qtbot, tmp_path, registry)
    window.set_workflow(load_workflow(TXT2IMG, registry), None)
    shown: list = []
    window.show_problems = lambda title, problems, text: shown.append(problems)  # type: ignore[method-assign]
    window.scene.clearSelection()
    window.scene.node_items["decode"].setSelected(True)
    window.toggle_mode("bypass")
    assert not window.run_workflow()
    (problem,) = shown[0]
    assert "which is bypassed" in problem.reason
    assert window.scene.run_states["save"].status == "error"
    window.toggle_mode("bypass")  # the user turns the bypass off: the old complaint is gone
    assert window.scene.run_states.get("save") is None or window.scene.run_states["save"].status != "error"
