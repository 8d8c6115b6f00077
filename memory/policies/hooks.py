"""Named forward hooks: register a (pre, post) pair under a name on a module, remove it by name.

May import: stdlib, torch.
Names are constants owned by each policy (e.g. `STREAM_HOOK`); registering a name twice on one module is a
bug (two policies fighting over the same weights), so it raises, as diffusers' HookRegistry does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_ATTR = "_nodeloom_hooks"


def add_hooks(
    module: torch.nn.Module,
    name: str,
    pre: Callable[[torch.nn.Module, Any], Any] | None = None,
    post: Callable[[torch.nn.Module, Any, Any], Any] | None = None,
) -> None:
    registry: dict[str, list[Any]] = module.__dict__.setdefault(_ATTR, {})
    if name in registry:
        raise RuntimeError(f"hook {name!r} is already registered on {type(module).__name__}")
    handles = []
    if pre is not None:
        handles.append(module.register_forward_pre_hook(pre))
    if post is not None:
        handles.append(module.register_forward_hook(post))
    registry[name] = handles


def remove_hooks(module: torch.nn.Module, name: str) -> None:
    for handle in module.__dict__.get(_ATTR, {}).pop(name, []):
        handle.remove()
