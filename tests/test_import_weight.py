"""What a command imports: listing node types and painting the editor must not import torch's model stacks,
and importing `memory.placement` loads nothing that imports it back. (No import cycle anywhere, function-level
imports included: tests/test_import_graph.py, in the fast lane.)"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Integration and parity: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "diffusers", "transformers")


def _modules_after(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return {"modules": set(json.loads(out.stdout.strip().splitlines()[-1])), "stdout": out.stdout}


def test_app_nodes_lists_every_node_type_without_torch_diffusers_or_transformers() -> None:
    seen = _modules_after("from app.main import main\nassert main(['nodes']) == 0")
    assert "Sampler" in seen["stdout"] and "LLMGenerate" in seen["stdout"]
    assert not [m for m in HEAVY if m in seen["modules"]]


def test_the_editors_first_paint_imports_no_diffusers_pipeline() -> None:
    code = """
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
import tempfile
for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
    QSettings.setPath(fmt, QSettings.Scope.UserScope, tempfile.mkdtemp())
from app.gui.main_window import MainWindow
from nodes.registry import default_registry
from pathlib import Path
app = QApplication([])
window = MainWindow(default_registry(entry_point_packs=False))
window.show()
window.open_path(Path("resources/workflows/txt2img.json"), confirm=False)
app.processEvents()
assert not window.grab().isNull()
window.close()
"""
    modules = _modules_after(code)["modules"]
    assert "diffusers" not in modules and "transformers" not in modules
    # Declarations only: families (and their detector), sampler, prompt-weighting and resize-method names (none imports torch).
    light = {
        "pipelines.diffusion.families",
        "pipelines.diffusion.family_detect",  # the registry's detector: stdlib + families, read by the library
        "pipelines.diffusion.family_types",  # the registry's dataclasses (stdlib only)
        "pipelines.diffusion.families_image",  # registry entries split out of families (data only)
        "pipelines.diffusion.families_video",
        "pipelines.diffusion.families_qwen21",
        "pipelines.diffusion.step_cache",  # the Sampler's cache choices (torch only inside functions)
        "pipelines.diffusion.guidance",  # the Sampler's cfg_rule names (stdlib only)
        "pipelines.diffusion.schedulers",
        "pipelines.diffusion.prompt_weights",
        "pipelines.diffusion.resize",
        "pipelines.diffusion.tiling",
    }
    assert not [m for m in modules if m.startswith("pipelines.diffusion.") and m not in light]


def _memory_imports() -> dict[str, set[str]]:
    """memory module -> the memory modules it imports at module level (TYPE_CHECKING blocks excluded)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((REPO / "memory").rglob("*.py")):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        deps: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("memory"):
                deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("memory")}
        graph[name] = deps
    return graph


def test_importing_placement_imports_nothing_that_imports_it_back() -> None:
    modules = _modules_after("import memory.placement")["modules"]
    graph = _memory_imports()
    loaded = {m for m in modules if m.startswith("memory")}
    assert not [m for m in loaded if "memory.placement" in graph.get(m, ())]
    assert "memory.manager" not in loaded
