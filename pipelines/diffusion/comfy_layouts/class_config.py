"""A diffusers model class's config.json from its `__init__` defaults plus published overrides.

Lives here: `diffusers_config`. May import: stdlib, diffusers (inside the function). Used by the writers of the
shipped released-size config folders (`comfy_layouts.released`, `comfy_layouts.minimax_load`).
"""

from __future__ import annotations

import inspect
from typing import Any


def diffusers_config(class_name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The class's `__init__` defaults with `overrides`: the config.json its `from_config` reads."""
    import diffusers

    params = inspect.signature(getattr(diffusers, class_name).__init__).parameters
    defaults = {
        k: v.default for k, v in params.items() if k != "self" and v.default is not inspect.Parameter.empty
    }
    defaults = {k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items()}
    return {"_class_name": class_name, **defaults, **overrides}
