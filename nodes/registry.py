"""The node registry: which node types exist in this process.

Lives here: `NodeRegistry`, `default_registry`. Imports `nodes.spec` and the built-in node modules.
A registry is an object handed to the executor and the editor, never a global. Third-party packs
register through the `nodeloom.nodes` entry-point group; the entry point names either an iterable of
`NodeSpec` or a callable taking the registry.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from importlib.metadata import entry_points

from nodes.spec import NodeSpec

ENTRY_POINT_GROUP = "nodeloom.nodes"

log = logging.getLogger(__name__)


class NodeRegistry:
    def __init__(self) -> None:
        self._specs: dict[str, NodeSpec] = {}
        # Entry points that failed to load: (name, reason); shown by the editor and `app nodes`.
        self.load_errors: list[tuple[str, str]] = []
        # Node types that came from third-party packs: their cost is unknown, so `app plan` does not run them.
        self.pack_types: set[str] = set()

    def register(self, spec: NodeSpec, *, replace: bool = False) -> None:
        if spec.type in self._specs and not replace:
            raise ValueError(f"node type {spec.type!r} is already registered")
        self._specs[spec.type] = spec

    def register_all(self, specs: Iterable[NodeSpec]) -> None:
        for spec in specs:
            self.register(spec)

    def get(self, type_name: str) -> NodeSpec | None:
        return self._specs.get(type_name)

    def __getitem__(self, type_name: str) -> NodeSpec:
        return self._specs[type_name]

    def __contains__(self, type_name: object) -> bool:
        return type_name in self._specs

    def __iter__(self) -> Iterator[NodeSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def categories(self) -> dict[str, list[NodeSpec]]:
        out: dict[str, list[NodeSpec]] = {}
        for spec in sorted(self._specs.values(), key=lambda s: (s.category, s.title)):
            out.setdefault(spec.category, []).append(spec)
        return out

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> list[str]:
        """Load third-party node packs; returns the names that loaded. A broken pack is reported, not fatal."""
        loaded = []
        for ep in entry_points(group=group):
            before = set(self._specs)
            try:
                obj = ep.load()
                if callable(obj) and not isinstance(obj, NodeSpec):
                    result = obj(self)
                    if result is not None:
                        self.register_all(result)
                else:
                    self.register_all([obj] if isinstance(obj, NodeSpec) else obj)
                loaded.append(ep.name)
                self.pack_types |= set(self._specs) - before
            except Exception as exc:  # a third-party pack may raise anything; keep the app usable
                reason = f"{type(exc).__name__}: {exc}"
                log.warning("node pack %r failed to load: %s", ep.name, reason)
                self.load_errors.append((ep.name, reason))
        return loaded


def default_registry(*, entry_point_packs: bool = True) -> NodeRegistry:
    """A fresh registry with Nodeloom's own nodes and, unless disabled, installed node packs."""
    from nodes import basic, controlnet, diffusion, image_ops, llm
    from nodes.comfy import node_types as comfy_node_types

    registry = NodeRegistry()
    for module in (basic, diffusion, image_ops, controlnet, llm, comfy_node_types):
        registry.register_all(module.NODES)
    from nodes.lora import NODES as LORA_NODES  # LoadLoRA (issue 15)

    registry.register_all(LORA_NODES)
    from nodes.reroute import NODES as REROUTE_NODES  # a dot on a wire (issue 16)

    registry.register_all(REROUTE_NODES)
    from nodes.video import NODES as VIDEO_NODES  # frames + fps + sound, no model (issue 27)

    registry.register_all(VIDEO_NODES)
    from nodes.video_latent import NODES as VIDEO_LATENT_NODES  # Empty Video Latent, VAE Decode Video (Wan)

    registry.register_all(VIDEO_LATENT_NODES)
    from nodes.wan_video import NODES as WAN_VIDEO_NODES  # Wan image-to-video conditioning (issue 27)

    registry.register_all(WAN_VIDEO_NODES)
    from nodes.clip_vision import NODES as CLIP_VISION_NODES  # Wan 2.1 I2V's image encoder file

    registry.register_all(CLIP_VISION_NODES)
    from nodes.flux2 import NODES as FLUX2_NODES  # FLUX.2 reference pictures (issue 26)

    registry.register_all(FLUX2_NODES)
    from nodes.qwenimage_edit import NODES as QWENIMAGE_EDIT_NODES  # Qwen-Image-Edit prompts (issue 26)

    registry.register_all(QWENIMAGE_EDIT_NODES)
    from nodes.qwenimage21 import NODES as QWENIMAGE21_NODES  # Qwen-Image 2.1 prompts (issue 26)

    registry.register_all(QWENIMAGE21_NODES)

    from nodes.ltx2 import NODES as LTX2_NODES  # LTXV Image to Video (issue 27)

    registry.register_all(LTX2_NODES)
    from nodes.ltx2_comfy_nodes import NODES as LTX2_COMFY_NODES  # ComfyUI's LTX-2 steps, sigmas (issue 32)

    registry.register_all(LTX2_COMFY_NODES)

    from nodes.minimax import NODES as MINIMAX_NODES  # MiniMax H3 Image to Video (issue 27)

    registry.register_all(MINIMAX_NODES)
    from nodes.image_batch import NODES as IMAGE_BATCH_NODES  # Batch Images, Image From Batch (issue 32)

    registry.register_all(IMAGE_BATCH_NODES)
    if entry_point_packs:
        registry.load_entry_points()
    return registry
