"""ComfyUI's text nodes mapped onto Nodeloom's: TextGenerate onto LLM Generate, StringConcatenate onto ours.

Lives here: `TEXT_MAPPERS`, `TEXT_GENERATE_WIDGETS`, `textgen_widgets`. Imports `nodes.comfy.graph`,
`nodes.comfy.declarations` (the seed companion values) and `nodes.comfy.mapping` (Emit and helpers).

TextGenerate (ComfyUI 2026, comfy_extras/nodes_textgen.py) generates with the LLM inside a text encoder
(`clip`, from a CLIP loader). Ours is LLM Generate on a Load LLM; the converter gives each CLIP loader that
feeds a TextGenerate a Load LLM of the same file (nodes.comfy.llm_loaders), and export folds it back. Its
`sampling_mode` is a dynamic combo: "on" brings temperature, top_k, top_p, min_p, repetition_penalty, seed
(and presence_penalty), "off" none of them; API files name them `sampling_mode.<name>`, UI files keep them
in the one widget list, which `textgen_widgets` reads. Its `image` input goes to LLM Generate's (a Qwen-VL
model looks at the picture); its newer `system_prompt` input goes to LLM Generate's; video and audio are
noted as unused.
"""

from __future__ import annotations

from typing import Any

from nodes.comfy.declarations import CONTROL_VALUES
from nodes.comfy.graph import ComfyNode, LinkRef
from nodes.comfy.mapping import Emit, MapContext, Mapper, _emit

# The "on" options, in ComfyUI's declaration order (presence_penalty is newer and optional).
TEXT_GENERATE_SAMPLING = (
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repetition_penalty",
    "seed",
    "presence_penalty",
)
TEXT_GENERATE_WIDGETS = ("prompt", "max_length", "sampling_mode")
_TRAILING = ("thinking", "use_default_template")


def textgen_widgets(values: list[Any]) -> dict[str, Any]:
    """A UI-format TextGenerate's widget list by name (see the module docstring)."""
    named: dict[str, Any] = dict(zip(TEXT_GENERATE_WIDGETS, values, strict=False))
    rest = list(values[len(TEXT_GENERATE_WIDGETS) :])
    if named.get("sampling_mode") == "on":
        for name in TEXT_GENERATE_SAMPLING:
            if not rest or isinstance(rest[0], bool):  # the trailing booleans: presence_penalty absent
                break
            named[f"sampling_mode.{name}"] = rest.pop(0)
            if name == "seed" and rest and isinstance(rest[0], str) and rest[0] in CONTROL_VALUES:
                rest.pop(0)  # the seed's control_after_generate: an editor setting
    named.update(zip(_TRAILING, rest, strict=False))
    return named


def _text_generate(node: ComfyNode, ctx: MapContext) -> Emit:
    inputs = dict(node.inputs)
    if isinstance(inputs.get("widgets_values"), list):  # UI format: the widget list, decoded here
        inputs = {**textgen_widgets(inputs.pop("widgets_values")), **inputs}

    def option(name: str, default: Any) -> Any:
        return inputs.get(f"sampling_mode.{name}", inputs.get(name, default))

    sample = inputs.get("sampling_mode", "on") == "on"
    params: dict[str, Any] = {
        "prompt": inputs.get("prompt", ""),
        "max_new_tokens": inputs.get("max_length", 512),
        "sampling": "sample" if sample else "greedy",
        "chat": inputs.get("use_default_template", True),
    }
    if inputs.get("system_prompt") not in (None, ""):  # newer TextGenerate's optional system message
        params["system_prompt"] = inputs["system_prompt"]
    if sample:
        params |= {
            "temperature": option("temperature", 0.7),
            "top_k": option("top_k", 64),
            "top_p": option("top_p", 0.95),
            "repetition_penalty": option("repetition_penalty", 1.05),
            "seed": option("seed", 0),
        }
        min_p, presence = option("min_p", 0.0), option("presence_penalty", 0.0)
        if isinstance(min_p, int | float) and min_p > 0:
            params["min_p"] = float(min_p)
        if isinstance(presence, int | float) and presence > 0:
            ctx.graph.note(node, f"approximated: presence_penalty {presence} is not applied")
    if inputs.get("thinking") is True:
        ctx.graph.note(node, "approximated: thinking mode is not switched on (the chat template's default)")
    for media in ("video", "audio"):
        if isinstance(inputs.get(media), LinkRef):
            ctx.graph.note(node, f"its {media} input is not used: LLM Generate takes text and pictures only")
    emit = _emit(node, "LLMGenerate", params, ("text",))
    if isinstance(inputs.get("clip"), LinkRef):
        emit.inputs["llm"] = inputs["clip"]  # a text encoder: the converter gives it a Load LLM
    if isinstance(inputs.get("image"), LinkRef):  # a vision model (Qwen-VL) looks at it
        emit.inputs["image"] = inputs["image"]
    return emit


def _string_concatenate(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "StringConcatenate", {}, ("text",))  # string_a, string_b, delimiter: declared


def _string_replace(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "StringReplace", {}, ("text",))  # string, find, replace: declared


TEXT_MAPPERS: dict[str, Mapper] = {
    "TextGenerate": _text_generate,
    "StringConcatenate": _string_concatenate,
    "StringReplace": _string_replace,
}
