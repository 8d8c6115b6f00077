"""The desktop GUI (PySide6): `launch(workflow_path, registry, models_dirs)` opens the editor window.

Lives here: `launch`. Imports Qt and `app.gui.*`; Qt is imported only when this package is.
Modules: main_window (layout, actions), file_ops, edit_ops, run_ops, scene/view/node_item/edge_item/port_item/
group_item (the canvas), commands (undo), palette, inspector, output_panel, plots, run_worker,
settings, autosave, minimap, theme, screenshot.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from nodes.registry import NodeRegistry


def launch(workflow_path: Path | None, registry: NodeRegistry, models_dirs: Sequence[Path] = ()) -> int:
    """Open the main window (optionally on a workflow) and run the event loop; returns the exit code."""
    from app.gui.platform_check import check_display_libraries

    missing = check_display_libraries()
    if missing:  # before Qt: its own abort names only one of the libraries
        print(missing, file=sys.stderr)
        return 1
    from PySide6.QtWidgets import QApplication

    from app.gui.main_window import MainWindow
    from app.gui.theme import apply_theme

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Nodeloom")
    app.setOrganizationName("Nodeloom")
    apply_theme(app)  # type: ignore[arg-type]
    from pipelines.models_library import ModelsLibrary, load_saved_roots, roots_from_env

    # As `app --run` searches them: --models-dir first, then NODELOOM_MODELS_DIRS, then the saved roots.
    window = MainWindow(
        registry, library=ModelsLibrary([*models_dirs, *roots_from_env(), *load_saved_roots()])
    )
    window.show()
    recovered = window.offer_recovery()  # sets an unreadable recovery file aside as *.broken
    if workflow_path is not None and recovered:
        # Unsaved work comes first, but say so: the user asked for that file and would otherwise not know.
        message = f"Recovered unsaved work; {workflow_path} (from the command line) was not opened"
        window.output.add_log(message)
        window.status(message)
    elif workflow_path is not None:
        window.open_path(Path(workflow_path), confirm=False)
    elif not recovered:
        window.view.fit()
    return app.exec()
