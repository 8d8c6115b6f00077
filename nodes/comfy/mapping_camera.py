"""ComfyUI's CameraAngle (the Qwen-Image-Edit multiple-angles templates) resolved at import to its prompt text.

Lives here: `CAMERA_MAPPERS`, `camera_prompt`. Imports `nodes.comfy.graph` and `nodes.comfy.mapping` (Constant
and helpers); pure functions, no torch.

CameraAngle (comfy_extras/nodes_camera_angle.py) turns three widgets (horizontal_angle 0..360, vertical_angle
-30..60, zoom 0..10) into a shot description for the prompt ("front view eye-level shot medium shot") and a
`camera_info` structure for 3D nodes. Its prompt depends on nothing else, so when the three are constants the node
is a constant string: each consumer of `prompt` takes it as a param (no node is emitted). The terms are ComfyUI's:
the values clamped to the widget ranges (the angles as ints); eight 45-degree sectors, sector edges at 22.5 + 45k
(0 the front, 90 the right side); vertical below -15 low-angle, below 15 eye-level, below 45 elevated, else
high-angle; zoom below 2 wide, below 6 medium, else close-up. A wired angle, or a `camera_info` that feeds anything,
stays unsupported.
"""

from __future__ import annotations

from nodes.comfy.graph import ComfyNode, LinkRef
from nodes.comfy.mapping import Constant, Emit, MapContext, Mapper, _get, unsupported_emit

_SECTORS = (
    "front view",
    "front-right quarter view",
    "right side view",
    "back-right quarter view",
    "back view",
    "back-left quarter view",
    "left side view",
    "front-left quarter view",
)
_PROMPT_SLOT = 1  # outputs: camera_info (0), prompt (1)


def camera_prompt(horizontal_angle: float, vertical_angle: float, zoom: float) -> str:
    """CameraAngle's shot description (see the module docstring for where the terms come from)."""
    h = max(0, min(360, int(horizontal_angle))) % 360
    v = max(-30, min(60, int(vertical_angle)))
    z = max(0.0, min(10.0, float(zoom)))
    # sector k covers [45k - 22.5, 45k + 22.5): 0 is the front, so 337.5..360 is the front again
    direction = _SECTORS[int((h + 22.5) // 45) % 8]
    if v < -15:
        elevation = "low-angle shot"
    elif v < 15:
        elevation = "eye-level shot"
    elif v < 45:
        elevation = "elevated shot"
    else:
        elevation = "high-angle shot"
    distance = "wide shot" if z < 2 else "medium shot" if z < 6 else "close-up"
    return f"{direction} {elevation} {distance}"


def _camera_info_used(node: ComfyNode, ctx: MapContext) -> list[str]:
    return [
        other.class_type
        for other in ctx.graph.nodes.values()
        for value in other.inputs.values()
        if isinstance(value, LinkRef) and value.node == node.id and value.slot != _PROMPT_SLOT
    ]


def _camera_angle(node: ComfyNode, ctx: MapContext) -> Constant | Emit:
    values = {name: _get(node, name, default) for name, default in _DEFAULTS.items()}
    wired = [name for name, value in values.items() if isinstance(value, LinkRef)]
    if wired:
        return unsupported_emit(node, f"its {', '.join(wired)} is wired (only constant angles are resolved)")
    users = _camera_info_used(node, ctx)
    if users:
        return unsupported_emit(
            node, f"its camera_info feeds {', '.join(users)} (3D cameras are not made here)"
        )
    try:
        prompt = camera_prompt(values["horizontal_angle"], values["vertical_angle"], values["zoom"])
    except (TypeError, ValueError):
        return unsupported_emit(node, f"its angles are not numbers: {values!r}")
    ctx.graph.note(node, f"resolved at import to its prompt {prompt!r}")
    return Constant({_PROMPT_SLOT: prompt})


_DEFAULTS = {"horizontal_angle": 0, "vertical_angle": 0, "zoom": 5.0}

CAMERA_MAPPERS: dict[str, Mapper] = {"CameraAngle": _camera_angle}
