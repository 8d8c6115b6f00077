"""End to end: after the ControlNet example runs, the Output dock shows the saved picture, not the edge map."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.gui.history import read_history
from tests.gui_support import make_window
from tests.test_gui_run import wait_until

pytestmark = pytest.mark.slow

CONTROLNET = Path(__file__).resolve().parent.parent / "resources" / "workflows" / "controlnet.json"


def test_the_controlnet_example_ends_on_its_saved_picture(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry, for_runs=True)
    assert window.open_path(CONTROLNET, confirm=False)
    window.model.set_param("sampler", "steps", 2)
    assert window.run_workflow()
    wait_until(lambda: window.last_result is not None and not window.runner.running, 240)
    assert window.last_result.ok, window.last_result.error
    assert window.output.caption.text().startswith("save: controlnet")
    # The saved picture and the Preview Image's edge map (issue 29: previews go in the strip too).
    assert window.output.files.count() == 2
    # Run again unchanged: everything is cached, no new history entry, and the result is still the picture.
    window.last_result = None
    assert window.run_workflow()
    wait_until(lambda: window.last_result is not None and not window.runner.running, 240)
    assert window.output.caption.text().startswith("save: controlnet")
    assert len(read_history(tmp_path / "outputs")) == 1
