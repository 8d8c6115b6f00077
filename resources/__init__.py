"""Package data: the workflow JSON Schema, shipped workflows, config-only model folders, demo models."""

from pathlib import Path

RESOURCES_DIR = Path(__file__).resolve().parent
WORKFLOWS_DIR = RESOURCES_DIR / "workflows"
