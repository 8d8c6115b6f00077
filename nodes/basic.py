"""Basic nodes: primitives, text helpers, image and text files.

Lives here: Nodeloom's own general-purpose node types and the `NODES` tuple of their specs. Imports
`nodes.declare`, `nodes.kinds` (as `kinds`: its INT/FLOAT/BOOL are parameter kinds, nodes.types' are wire
types), `nodes.spec`, `nodes.types`, `nodes.context`, `nodes.files`, `pipelines.text_limits`, PIL; `nodes.png` (torch) inside the
run functions, so listing node types stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image

from nodes import kinds
from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.files import prefix_problem, write_new_output
from nodes.spec import NodeSpec, Output
from nodes.types import BOOL, FLOAT, IMAGE, INT, MASK, TEXT
from pipelines.text_limits import format_template, template_problem

SEED_MAX = 2**63 - 1


@node_type(
    "Text",
    tags=("PrimitiveStringMultiline", "PrimitiveString"),
    title="Text",
    category="primitives",
    outputs=[Output("text", TEXT)],
    description="A piece of text typed in the node.",
)
class Text(Node):
    text: str = param(kinds.TEXT, "", help="Any text; multi-line.", comfy="value")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        return {"text": self.text}


@node_type(
    "Int",
    tags=("PrimitiveInt",),
    title="Integer",
    category="primitives",
    outputs=[Output("value", INT)],
    description="A whole number.",
)
class Int(Node):
    value: int = param(kinds.INT, 0, min=-(2**31), max=2**31 - 1, comfy="value")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        return {"value": self.value}


@node_type(
    "Float",
    tags=("PrimitiveFloat",),
    title="Float",
    category="primitives",
    outputs=[Output("value", FLOAT)],
    description="A decimal number.",
)
class Float(Node):
    value: float = param(kinds.FLOAT, 0.0, step=0.1, comfy="value")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        return {"value": float(self.value)}


@node_type(
    "Bool",
    tags=("PrimitiveBoolean",),
    title="Boolean",
    category="primitives",
    outputs=[Output("value", BOOL)],
    description="True or false.",
)
class Bool(Node):
    value: bool = param(kinds.BOOL, False, comfy="value")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        return {"value": self.value}


@node_type(
    "Seed",
    title="Seed",
    category="primitives",
    outputs=[Output("seed", INT)],
    description="A random seed to share between samplers.",
)
class Seed(Node):
    seed: int = param(
        kinds.SEED,
        0,
        min=0,
        max=SEED_MAX,
        help="Random seed; the same seed gives the same picture.",
        comfy="value",
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        return {"seed": self.seed}


@node_type(
    "FormatText",
    title="Format Text",
    category="text",
    outputs=[Output("text", TEXT)],
    description="Fill a template with up to three texts.",
)
class FormatText(Node):
    a: str | None = wire(TEXT, optional=True)
    b: str | None = wire(TEXT, optional=True)
    c: str | None = wire(TEXT, optional=True)
    template: str = param(
        kinds.TEXT, "{a}", help="Python format string using {a}, {b}, {c}.", validate=template_problem
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        return {
            "text": format_template(self.template, {"a": self.a or "", "b": self.b or "", "c": self.c or ""})
        }


@node_type(
    "Concatenate",
    title="Concatenate",
    category="text",
    outputs=[Output("text", TEXT)],
    description="Join two texts with a separator.",
)
class Concatenate(Node):
    a: str = wire(TEXT)
    b: str = wire(TEXT)
    separator: str = param(kinds.STRING, " ")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        return {"text": f"{self.a}{self.separator}{self.b}"}


@node_type(
    "SaveText",
    title="Save Text",
    category="output",
    is_output=True,
    description="Write the text to a numbered .txt file in the output folder.",
)
class SaveText(Node):
    text: str = wire(TEXT)
    prefix: str = param(
        kinds.STRING, "text", help="File name prefix; a number follows.", validate=prefix_problem
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        text = self.text
        path = write_new_output(
            ctx.out_dir, self.prefix, ".txt", lambda tmp: tmp.write_text(text, encoding="utf-8")
        )
        ctx.wrote_file(path)
        return {}


@node_type(
    "ShowText",
    title="Show Text",
    category="output",
    is_output=True,
    description="Show the text in the output panel.",
    tags=("PreviewAny",),  # ComfyUI's PreviewAny imports as this node (nodes/comfy/mapping_media.py)
)
class ShowText(Node):
    text: str = wire(TEXT)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        ctx.text(self.text, final=True)
        return {}


@node_type(
    "LoadImage",
    tags=("img2img",),
    title="Load Image",
    category="image",
    outputs=[Output("image", IMAGE), Output("mask", MASK)],
    description="Read an image file; its alpha channel becomes the mask (transparent = repaint).",
)
class LoadImage(Node):
    path: str = param(kinds.PATH, "", file_filter="Images (*.png *.jpg *.jpeg *.webp)", comfy="image")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from nodes.png import alpha_mask, pil_to_tensor
        from pipelines.paths import builtin_image_path

        path = self.path
        # builtin:NAME is a picture shipped in resources/images (the example workflows' inputs), never outside.
        file = builtin_image_path(path) if path.startswith("builtin:") else Path(path).expanduser()
        if not file.is_file():
            raise FileNotFoundError(f"field 'path': no image at {file}")

        with Image.open(file) as image:
            return {"image": pil_to_tensor(image), "mask": alpha_mask(image)}


@node_type(
    "SaveImage",
    title="Save Image",
    category="output",
    is_output=True,
    description="Write numbered PNGs (never overwriting) with the workflow embedded.",
)
class SaveImage(Node):
    image: Any = wire(IMAGE)
    prefix: str = param(
        kinds.STRING,
        "nodeloom",
        help="File name prefix; a number follows.",
        validate=prefix_problem,
        comfy="filename_prefix",
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from nodes.png import save_png_with_workflow, tensor_to_pil  # torch: only when a node runs

        for picture in tensor_to_pil(self.image):
            path = write_new_output(
                ctx.out_dir,
                self.prefix,
                ".png",
                lambda tmp, picture=picture: save_png_with_workflow(picture, tmp, ctx.workflow_json),
            )
            ctx.wrote_file(path)
            ctx.preview(picture, final=True)
        return {}


@node_type(
    "PreviewImage",
    title="Preview Image",
    category="output",
    is_output=True,
    description="Show the image without saving it.",
)
class PreviewImage(Node):
    image: Any = wire(IMAGE)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from nodes.png import tensor_to_pil

        for picture in tensor_to_pil(self.image):
            ctx.preview(picture, final=True)
        return {}


NODES: tuple[NodeSpec, ...] = tuple(
    n.spec
    for n in (
        Text,
        Int,
        Float,
        Bool,
        Seed,
        FormatText,
        Concatenate,
        SaveText,
        ShowText,
        LoadImage,
        SaveImage,
        PreviewImage,
    )
)
