"""File handling in the window: save and reload, the dirty marker, confirmation, invalid files, PNG drops,
recent files, and autosave with crash recovery."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QMimeData, QPoint, QPointF, QSettings, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from app.gui.autosave import Autosave
from app.gui.main_window import MainWindow
from nodes.png import save_png_with_workflow
from tests.gui_support import make_window

REPO = Path(__file__).resolve().parent.parent
# A user's own file (a copy): the shipped examples open as templates (see test_gui_examples.py).
DEMO = Path(tempfile.mkdtemp(prefix="nodeloom-files-")) / "text_demo.json"
DEMO.write_text((REPO / "resources" / "workflows" / "text_demo.json").read_text())


@pytest.fixture
def window(qtbot, tmp_path: Path, registry) -> MainWindow:
    return make_window(qtbot, tmp_path, registry)


def test_save_then_reload_gives_back_the_same_graph(
    window: MainWindow, tmp_path: Path, registry, qtbot
) -> None:
    assert window.open_path(DEMO)
    assert window.windowTitle().startswith("text_demo.json —") and "*" not in window.windowTitle()
    out = tmp_path / "copy.json"
    assert window.save_to(out)
    original, saved = json.loads(DEMO.read_text()), json.loads(out.read_text())
    assert saved["nodes"].keys() == original["nodes"].keys()
    for nid, node in original["nodes"].items():
        assert saved["nodes"][nid]["inputs"] == node["inputs"]
        assert saved["nodes"][nid]["params"] == node["params"]
        assert saved["ui"]["nodes"][nid]["pos"] == original["ui"]["nodes"][nid]["pos"]
    other = make_window(qtbot, tmp_path / "second", registry)
    assert other.open_path(out)
    assert other.model.to_workflow().to_dict()["nodes"] == window.model.to_workflow().to_dict()["nodes"]
    assert str(out.resolve()) == window.settings.recent()[0]


def test_title_marks_unsaved_changes_and_save_clears_it(window: MainWindow, tmp_path: Path) -> None:
    window.open_path(DEMO)
    window.scene.add_node("Text", QPointF(0, 300))
    assert window.windowTitle().startswith("text_demo.json* —")
    window.save_to(tmp_path / "x.json")
    assert window.windowTitle().startswith("x.json —")
    window.undo_stack.undo()  # back past the save point: dirty again
    assert "*" in window.windowTitle()


def test_replacing_unsaved_work_asks_first(window: MainWindow) -> None:
    window.scene.add_node("Text", QPointF(0, 0))
    window.ask_save_changes = lambda: "cancel"  # type: ignore[method-assign]
    window.new_file()
    assert window.model.node_ids() == ["text"]
    assert not window.open_path(DEMO)
    assert window.model.node_ids() == ["text"]
    window.ask_save_changes = lambda: "discard"  # type: ignore[method-assign]
    window.new_file()
    assert window.model.node_ids() == []


def test_an_invalid_file_lists_every_problem_and_keeps_the_graph(window: MainWindow, tmp_path: Path) -> None:
    window.scene.add_node("Text", QPointF(0, 0))
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "format": "nodeloom.workflow",
                "version": 1,
                "nodes": {
                    "a": {"type": "Txet", "params": {}},
                    "b": {"type": "Int", "params": {"value": "seven"}},
                    "c": {"type": "SaveText", "params": {}, "inputs": {"text": ["b", "value"]}},
                },
            }
        )
    )
    window.ask_save_changes = lambda: "discard"  # type: ignore[method-assign]
    assert not window.open_path(bad, confirm=False)
    assert window.model.node_ids() == ["text"]  # nothing lost
    assert window.problem_dialog is not None and window.problem_dialog.isVisible()
    text = window.problem_dialog.informativeText()
    assert "a.type: unknown node type 'Txet' (did you mean 'Text'?)" in text
    assert "b.value" in text and "seven" in text
    assert "c.text" in text and "INT" in text
    assert {p.node for p in window.last_problems} == {"a", "b", "c"}
    broken = tmp_path / "broken.json"
    broken.write_text("{ not json")
    assert not window.open_path(broken, confirm=False)
    assert "not valid JSON" in window.problem_dialog.informativeText()


def test_an_unfinished_graph_still_opens_with_a_warning(window: MainWindow, tmp_path: Path) -> None:
    path = tmp_path / "wip.json"
    path.write_text(
        json.dumps(
            {
                "format": "nodeloom.workflow",
                "version": 1,
                "nodes": {"save": {"type": "SaveText", "params": {}}},
            }
        )
    )
    assert window.open_path(path)
    assert window.model.node_ids() == ["save"]
    assert "required input" in window.problem_dialog.informativeText()


def test_dropping_a_png_with_an_embedded_workflow_opens_it(window: MainWindow, tmp_path: Path) -> None:
    png = tmp_path / "picture.png"
    save_png_with_workflow(Image.new("RGB", (8, 8)), png, json.loads(DEMO.read_text()))
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(png))])
    enter = QDragEnterEvent(
        QPoint(10, 10),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(window, enter)
    assert enter.isAccepted()  # the window shows it will take the file
    event = QDropEvent(
        QPointF(10, 10),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(window, event)
    assert sorted(window.model.node_ids()) == ["greeting", "name", "save", "show"]
    assert window.path is None  # saving asks for a JSON name rather than overwriting the picture


# Above Linux's PID_MAX_LIMIT (2**22) and macOS's 99999: no running process can have it.
DEAD_PID = 4_194_305


def pretend_crashed(autosave: Autosave, pid: int = DEAD_PID) -> Path:
    """Turn this process's autosave file into one left behind by process `pid` (tests share one process)."""
    data = json.loads(autosave.path.read_text())
    data["pid"] = pid
    orphan = autosave.folder / f"autosave-{pid}.json"
    orphan.write_text(json.dumps(data))
    autosave.path.unlink()
    return orphan


def test_autosave_and_recovery_after_a_crash(qtbot, tmp_path: Path, registry) -> None:
    first = make_window(qtbot, tmp_path, registry)
    first.open_path(DEMO)
    first.scene.add_node("Text", QPointF(0, 400))
    first.autosave_now()  # what the one-minute timer does
    assert first.autosave.path.name == f"autosave-{os.getpid()}.json" and first.autosave.path.exists()
    expected = first.model.to_workflow().to_dict()["nodes"]
    pretend_crashed(first.autosave)  # the process dies here (no closeEvent). Next start:
    second = make_window(qtbot, tmp_path, registry)
    second.ask_recover = lambda when: True  # type: ignore[method-assign]
    assert second.offer_recovery()
    assert second.model.to_workflow().to_dict()["nodes"] == expected
    assert second.path == DEMO and second.windowTitle().startswith("text_demo.json*")
    second.ask_save_changes = lambda: "discard"  # type: ignore[method-assign]
    second.close()  # a clean exit removes the (claimed) autosave: no offer next time
    assert not list((tmp_path / "autosave").glob("autosave*.json"))
    third = make_window(qtbot, tmp_path, registry)
    third.ask_recover = lambda when: pytest.fail("no recovery after a clean exit")  # type: ignore[method-assign]
    assert not third.offer_recovery()


def test_no_recovery_offer_while_another_window_still_owns_the_autosave(
    qtbot, tmp_path: Path, registry
) -> None:
    autosave = Autosave(tmp_path / "autosave")
    autosave.write(json.loads(DEMO.read_text()), None)
    theirs = pretend_crashed(
        autosave, os.getppid()
    )  # a process that is alive: another Nodeloom still running
    window = make_window(qtbot, tmp_path, registry)
    window.ask_recover = lambda when: pytest.fail("that work is not lost")  # type: ignore[method-assign]
    assert not window.offer_recovery()
    window.scene.add_node("Text", QPointF(0, 0))
    window.autosave_now()
    assert window.autosave.path.exists() and window.autosave.path != theirs
    window.close()  # this window's clean exit removes only its own file
    assert not window.autosave.path.exists()
    assert theirs.exists()  # and the other window's is left alone


def test_the_newest_orphan_is_offered_and_an_unreadable_one_is_set_aside(
    qtbot, tmp_path: Path, registry
) -> None:
    folder = tmp_path / "autosave"
    older, newer = (Autosave(folder) for _ in range(2))
    wf = json.loads(DEMO.read_text())
    older.write(wf, "older.json")
    older_file = pretend_crashed(older, DEAD_PID)
    newer.write(wf, "newer.json")
    newer_file = pretend_crashed(newer, DEAD_PID + 1)
    os.utime(older_file, (1_000_000, 1_000_000))
    os.utime(newer_file, (2_000_000, 2_000_000))
    broken = folder / f"autosave-{DEAD_PID + 2}.json"
    broken.write_text('{"pid": 1, "workflow": {')  # torn by a disk-full crash, say
    os.utime(broken, (3_000_000, 3_000_000))  # the newest, but unreadable
    window = make_window(qtbot, tmp_path, registry)
    offered: list[str] = []
    window.ask_recover = lambda when: offered.append(when) or True  # type: ignore[method-assign]
    assert window.offer_recovery()
    assert window.path == Path("newer.json") and len(offered) == 1
    assert not broken.exists() and (folder / (broken.name + ".broken")).read_text().startswith('{"pid": 1')
    assert older_file.exists()  # still there for the next start
    assert json.loads(window.autosave.path.read_text())["pid"] == os.getpid()  # claimed by this process
    assert window.autosave.path.stat().st_mtime == 2_000_000  # "autosaved at" still means the crash time


def _launch_and_inspect(
    tmp_path: Path, monkeypatch, registry, workflow_path: Path | None
) -> dict[str, object]:
    from PySide6.QtCore import QTimer

    from app.gui import launch

    for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):  # keep off the real ~/.config
        QSettings.setPath(fmt, QSettings.Scope.UserScope, str(tmp_path))
    monkeypatch.setenv("NODELOOM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(MainWindow, "ask_recover", lambda self, when: True)
    monkeypatch.setattr(MainWindow, "ask_save_changes", lambda self: "discard")
    seen: dict[str, object] = {}

    def inspect_and_quit() -> None:
        window = next(
            w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()
        )
        seen.update(
            path=window.path,
            nodes=sorted(window.model.node_ids()),
            status=window.statusBar().currentMessage(),
        )
        window.close()
        QApplication.instance().quit()

    QTimer.singleShot(200, inspect_and_quit)
    assert launch(workflow_path, registry) == 0
    return seen


def _orphan(folder: Path, workflow: dict, source: str | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"autosave-{DEAD_PID}.json"
    path.write_text(json.dumps({"source": source, "pid": DEAD_PID, "workflow": workflow}))
    return path


def test_an_accepted_recovery_wins_over_the_command_line_file_and_says_so(
    qtbot, tmp_path: Path, registry, monkeypatch
) -> None:
    wf = json.loads(DEMO.read_text())
    del wf["nodes"]["show"]
    _orphan(tmp_path / "data" / "autosave", wf, None)
    other = tmp_path / "other.json"
    other.write_text(DEMO.read_text())
    seen = _launch_and_inspect(tmp_path, monkeypatch, registry, other)
    assert seen["path"] is None and "show" not in seen["nodes"]  # the recovered graph
    assert "other.json" in str(seen["status"]) and "not opened" in str(seen["status"])


def test_a_recovery_that_fails_to_load_is_kept_as_broken(
    qtbot, tmp_path: Path, registry, monkeypatch
) -> None:
    wf = json.loads(DEMO.read_text())
    wf["nodes"]["show"]["type"] = "NoSuchNodeType"  # e.g. its node pack is not installed this time
    _orphan(tmp_path / "data" / "autosave", wf, None)
    seen = _launch_and_inspect(tmp_path, monkeypatch, registry, DEMO)
    assert seen["path"] == DEMO  # the recovery failed, so the command-line file opened
    kept = list((tmp_path / "data" / "autosave").glob("*.broken"))
    assert len(kept) == 1 and "NoSuchNodeType" in kept[0].read_text()
