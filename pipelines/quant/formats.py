"""The names of the weight storage formats a loader's `dtype` param offers, and how a choice splits.

Lives here: `STORAGE_CHOICES`, `split_precision`. May import: stdlib only, so node types can list the
choices without importing torch (the formats themselves live in pipelines.quant.storage).
"""

from __future__ import annotations

STORAGE_CHOICES: tuple[str, ...] = ("fp8_e4m3fn", "fp8_e5m2", "int8")


def split_precision(choice: str) -> tuple[str, str]:
    """A `dtype` param value -> (compute dtype choice, storage label or "")."""
    if choice in STORAGE_CHOICES:
        return "auto", choice
    return choice, ""
