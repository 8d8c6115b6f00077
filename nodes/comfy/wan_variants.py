"""The Wan variants ComfyUI runs and Nodeloom does not: which node or file of a workflow says so, for the check.

Lives here: `WAN_VARIANT_NODES`, `WAN_VARIANT_NAMES`, `wan_variant_findings`. Imports `nodes.comfy.graph`.

Their loaders name a Wan file ("wan2.1_14B_SCAIL_2_fp16.safetensors", a CLIPLoader of type "wan"), so the
file-name check alone would take them for Wan, which runs here. What makes them another model is the node
that builds their conditioning (reference video, pose, masks, sound, camera, tracks) or, for Wan-Alpha, its
pair of RGB and alpha VAE decoders; `nodes.comfy.family_check` reports each finding as a family Nodeloom
cannot run, naming that node, beside the node's own "unsupported" placeholder.
"""

from __future__ import annotations

from typing import Any

from nodes.comfy.graph import ComfyGraph

# ComfyUI class -> (family id, what the model is). Ids are ComfyUI's model names, lower case.
WAN_VARIANT_NODES: dict[str, tuple[str, str]] = {
    "WanAnimateToVideo": ("wan_animate", "Wan-Animate (a character driven by a pose video)"),
    "WanAnimate2ToVideo": ("wan_animate", "Wan-Animate 2 (a character driven by a pose video)"),
    "WanSCAILToVideo": ("wan_scail", "SCAIL (character replacement in a video)"),
    "WanVaceToVideo": ("wan_vace", "Wan VACE (reference, mask and control video conditioning)"),
    "WanSoundImageToVideo": ("wan_s2v", "Wan 2.2 S2V (speech to video)"),
    "WanSoundImageToVideoExtend": ("wan_s2v", "Wan 2.2 S2V (speech to video)"),
    "WanHuMoImageToVideo": ("wan_humo", "HuMo (a person from text, image and sound)"),
    "WanInfiniteTalkToVideo": ("wan_infinitetalk", "InfiniteTalk (talking video from sound)"),
    "WanFunControlToVideo": ("wan_fun", "Wan Fun Control (a control video)"),
    "Wan22FunControlToVideo": ("wan_fun", "Wan 2.2 Fun Control (a control video)"),
    "WanFunInpaintToVideo": ("wan_fun", "Wan Fun InP (first/last frame inpainting model)"),
    "WanCameraImageToVideo": ("wan_fun_camera", "Wan Fun Camera (camera-motion conditioning)"),
    "WanTrackToVideo": ("wan_ati", "ATI (motion tracks)"),
    "WanMoveTrackToVideo": ("wan_move", "Wan-Move (motion tracks)"),
    "WanDancerVideo": ("wan_dancer", "Wan Dancer (dance from music)"),
}
# Loader class -> (widget naming a file, marker in the name, family id, what the model is).
WAN_VARIANT_NAMES: tuple[tuple[str, str, str, str, str], ...] = (
    ("VAELoader", "vae_name", "wan_alpha", "wan_alpha", "Wan-Alpha (RGBA video: RGB and alpha VAE decoders)"),
    ("LoraLoaderModelOnly", "lora_name", "wan_alpha", "wan_alpha", "Wan-Alpha (RGBA video)"),
)


def wan_variant_findings(graph: ComfyGraph) -> list[tuple[str, str, str, str, str]]:
    """(node id, class, field, family, evidence) per node that makes the workflow a Wan variant (a family said
    once per workflow: the first node that shows it)."""
    out: list[tuple[str, str, str, str, str]] = []
    said: set[str] = set()
    for node_id, node in graph.nodes.items():
        found: tuple[str, str, str] | None = None  # (field, family, evidence)
        if node.class_type in WAN_VARIANT_NODES:
            family, what = WAN_VARIANT_NODES[node.class_type]
            found = ("model", family, f"its {node.class_type} node: {what}")
        for class_type, widget, marker, family, what in WAN_VARIANT_NAMES:
            name: Any = node.inputs.get(widget)
            if node.class_type == class_type and isinstance(name, str) and marker in name.lower():
                found = (widget, family, f"{name!r}: {what}")
        if found is not None and found[1] not in said:
            said.add(found[1])
            out.append((node_id, node.class_type, *found))
    return out
