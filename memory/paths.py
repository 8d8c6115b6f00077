"""Where Nodeloom keeps per-user data (learned memory peaks, caches).

May import: stdlib, platformdirs.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

DATA_DIR_ENV = "NODELOOM_DATA_DIR"


def user_data_dir() -> Path:
    """The per-user data folder. `NODELOOM_DATA_DIR` wins over the platform default.

    Read at call time (never cached) so tests and the CLI can point it elsewhere per run.
    """
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_data_dir("nodeloom"))
