"""Files dropped on the window: a workflow opens (ours) or imports (ComfyUI's, through `app.importing`), a
picture becomes a Load Image node where it was dropped, a video a Load Video node, a weights file becomes the
loader that takes it.

Lives here: `DropOpsMixin`, `DROP_SUFFIXES`, `classify_drop`, `loader_for`. Imports Qt (through the window),
`app.importing`, `app.gui.commands`, `nodes.comfy` (format checks), `nodes.png`, `nodes.video_read`,
`safetensors` (header keys).

A PNG is a workflow when it carries one (Nodeloom's or ComfyUI's chunks), else a picture; a saved mp4, webm or
webp likewise (Save Video embeds the workflow), else a video (a webp: a picture). Which loader a
.safetensors needs comes from the ComfyUI-style folder it sits in (loras/, vae/, ...), else from its
tensor names (a LoRA's `lora_` keys), else it is a checkpoint; a .gguf is an LLM.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QPointF

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
WEIGHT_SUFFIXES = (".safetensors", ".sft", ".gguf")
VIDEO_SUFFIXES = (".mp4", ".webm", ".mov", ".mkv", ".gif")
DROP_SUFFIXES = (".json", *IMAGE_SUFFIXES, *WEIGHT_SUFFIXES, *VIDEO_SUFFIXES)

# A ComfyUI-style models sub-folder -> the loader for the files in it (pipelines.models_library.KIND_FOLDERS).
FOLDER_LOADERS: dict[str, str] = {
    "checkpoints": "LoadDiffusionModel",
    "diffusion_models": "LoadDenoiser",
    "unet": "LoadDenoiser",
    "text_encoders": "LoadTextEncoder",
    "clip": "LoadTextEncoder",
    "vae": "LoadVAE",
    "loras": "LoadLoRA",
    "upscale_models": "LoadUpscaleModel",
}


def _has_lora_keys(path: Path) -> bool:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:  # the header only; numpy keeps torch unloaded
            return any("lora_" in key or ".lora." in key for key in f.keys())
    except Exception:  # not a readable safetensors file: the loader will say why when it runs
        return False


def loader_for(path: Path) -> str:
    """The node type that loads this weights file."""
    if path.suffix.lower() == ".gguf":
        return "LoadLLM"
    for parent in path.parents:
        if parent.name in FOLDER_LOADERS:
            return FOLDER_LOADERS[parent.name]
    return "LoadLoRA" if _has_lora_keys(path) else "LoadDiffusionModel"


def _comfy_png(path: Path) -> bool:
    from nodes.comfy.sources import read_comfy_data

    try:
        return read_comfy_data(path) is not None
    except Exception:  # a damaged PNG: treat it as a picture; Load Image reports what is wrong
        return False


def _video_has_workflow(path: Path) -> bool:
    from nodes.video_read import VideoFileError, read_video_workflow_text, video_container

    try:
        with path.open("rb") as f:
            kind = video_container(f.read(16))
        return kind is not None and bool(read_video_workflow_text(path, kind))
    except (OSError, VideoFileError):
        return False  # a damaged video: Load Video reports what is wrong with it


def classify_drop(path: Path) -> str:
    """ "workflow" (ours), "blueprint" (a saved subgraph), "comfy" (to import), "image", "video", "weights", or ""
    for a file we do not take."""
    suffix = path.suffix.lower()
    if suffix in (*VIDEO_SUFFIXES, ".webp") and _video_has_workflow(path):
        return "workflow"
    if suffix in VIDEO_SUFFIXES:
        return "video"
    if suffix == ".json":
        import json

        from nodes.workflow import FORMAT

        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return "workflow"  # opening it explains what is wrong with it
        if (
            isinstance(data, dict)
            and data.get("format") == FORMAT
            and (data.get("meta") or {}).get("blueprint")
        ):
            return "blueprint"  # a saved subgraph (app/gui/subgraph_blueprints.py): added where it is dropped
        return "workflow" if not isinstance(data, dict) or data.get("format") == FORMAT else "comfy"
    if suffix == ".png":
        from nodes.png import EmbeddedWorkflowError, read_embedded_workflow_text

        try:
            if read_embedded_workflow_text(path):
                return "workflow"
        except EmbeddedWorkflowError:
            return "image"
        return "comfy" if _comfy_png(path) else "image"
    if suffix in IMAGE_SUFFIXES:
        return "image"
    if suffix in WEIGHT_SUFFIXES:
        return "weights"
    return ""


class DropOpsMixin:
    def drop_files(self: MainWindow, paths: list[Path], scene_pos: QPointF) -> list[str]:
        """Handle files dropped at `scene_pos`; returns the ids of nodes it added. One workflow at most opens."""
        from app.gui.commands import SetParamCommand
        from app.importing import ImportUnavailable, import_file

        added: list[str] = []
        kinds = [(p, classify_drop(p)) for p in paths]
        for i, path in enumerate(p for p, k in kinds if k == "blueprint"):
            node = self.subgraph_ops.library.insert(str(path), QPointF(scene_pos.x() + 40 * i, scene_pos.y()))
            added += [node] if node is not None else []
        for path, kind in kinds:
            if kind == "workflow":
                self.open_path(path)
                return added
            if kind == "comfy":
                if self.confirm_discard():
                    self.import_path(path, import_file, ImportUnavailable)
                return added
        for i, (path, kind) in enumerate((p, k) for p, k in kinds if k in ("image", "video", "weights")):
            at = QPointF(scene_pos.x() + 40 * i, scene_pos.y() + 40 * i)
            if kind == "image":
                node = self.drop_history_picture(str(path), at)  # into a Load Image under it, else a new one
            else:
                loader = "LoadVideo" if kind == "video" else loader_for(path)
                self.undo_stack.beginMacro(f"Drop {path.name}")
                try:
                    node = self.scene.add_node(loader, at)
                    self.undo_stack.push(SetParamCommand(self.model, node, "path", str(path)))
                finally:
                    self.undo_stack.endMacro()
            if node is not None:
                added.append(node)
        skipped = [p.name for p, k in kinds if not k]
        if skipped:
            self.status(f"Not a workflow, picture, video or model file: {', '.join(skipped)}")
        elif added:
            self.status(f"Added {', '.join(added)}")
        return added
