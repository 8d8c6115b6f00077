"""The `--models-dir DIR` option every command that finds models takes (`add_models_dir_argument`).

Lives here: `add_models_dir_argument`. Imports the standard library only: `app.main` builds its parser with it
without importing the ComfyUI commands (`app.comfy_commands`, which bring the ComfyUI converter and its
mappings: a few tenths of a second the editor's start-up does not need).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_models_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models-dir",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="a models folder (ComfyUI-style with checkpoints/, vae/, ... or flat); repeatable",
    )
