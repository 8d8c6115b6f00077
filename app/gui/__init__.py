"""The desktop GUI (PySide6): `launch(workflow_path, registry, models_dirs)` opens the editor window.

Lives here: `launch`, `warm_imports`. Imports Qt and `app.gui.*`; Qt is imported only when this package is.
Modules: main_window (layout, actions), file_ops, edit_ops, run_ops, scene/view/node_item/edge_item/port_item/
group_item (the canvas), commands (undo), palette, inspector, output_panel, plots, run_worker,
settings, autosave, minimap, theme, screenshot.
"""

from __future__ import annotations

import importlib
import sys
import threading
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
    # The window is up: import the model libraries behind it, so the first Run doesn't spend its first
    # seconds there (about 4 s on a 2-core machine) while the user builds or reads the graph.
    threading.Thread(target=warm_imports, name="nodeloom-warm-imports", daemon=True).start()
    return app.exec()


def warm_imports() -> None:
    """Import what a first diffusion run needs (`DIFFUSION_IMPORTS`). A run that starts meanwhile waits
    on Python's import lock for the module being imported, so nothing is imported twice or half."""
    from pipelines.diffusion.families import DIFFUSION_IMPORTS

    for name in DIFFUSION_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a broken install shows up, with its message, when a node needs it
            return
