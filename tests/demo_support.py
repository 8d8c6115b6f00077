"""A test's own copy of a demo model: each demo model is built and saved once per test session (random weights,
fixed seeds, so every build is the same files), then copied into the folder a test asks for.

Lives here: `copy_demo_model`. May import: stdlib, pipelines.diffusion.demo_models.
The saved originals live in the session's data dir (tests/conftest.py sets NODELOOM_DATA_DIR per session).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from pipelines.diffusion.demo_models import save_demo_model


def copy_demo_model(name: str, out_dir: Path) -> Path:
    """What `save_demo_model(name, out_dir)` writes, copied from this session's saved original (built on first
    use). A copy, not hard links: some tests rewrite files in their folder, which must not reach the original."""
    original = Path(os.environ["NODELOOM_DATA_DIR"]) / "saved-demo-models" / name
    if not (original / "model_index.json").exists():
        save_demo_model(name, original)
    shutil.copytree(original, out_dir, dirs_exist_ok=True)
    return out_dir
