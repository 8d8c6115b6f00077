"""Basic nodes: primitives, text helpers, image and text files.

Lives here: the `NODES` tuple of Nodeloom's own general-purpose node types. Imports `nodes.spec`,
`nodes.types`, `nodes.context`, `nodes.files`, `pipelines.text_limits`, PIL; `nodes.png` (torch) inside the
run functions, so listing node types stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image

from nodes.context import NodeContext
from nodes.files import prefix_problem, write_new_output
from nodes.spec import Input, NodeSpec, Output, Param
from nodes.types import BOOL, FLOAT, IMAGE, INT, MASK, TEXT
from pipelines.text_limits import format_template, template_problem

SEED_MAX = 2**63 - 1


def _run_text(ctx: NodeContext, text: str) -> dict[str, Any]:
    return {"text": text}


def _run_int(ctx: NodeContext, value: int) -> dict[str, Any]:
    return {"value": value}


def _run_float(ctx: NodeContext, value: float) -> dict[str, Any]:
    return {"value": float(value)}


def _run_bool(ctx: NodeContext, value: bool) -> dict[str, Any]:
    return {"value": value}


def _run_seed(ctx: NodeContext, seed: int) -> dict[str, Any]:
    return {"seed": seed}


def _run_format(
    ctx: NodeContext, template: str, a: str | None, b: str | None, c: str | None
) -> dict[str, Any]:
    return {"text": format_template(template, {"a": a or "", "b": b or "", "c": c or ""})}


def _run_concat(ctx: NodeContext, a: str, b: str, separator: str) -> dict[str, Any]:
    return {"text": f"{a}{separator}{b}"}


def _run_save_text(ctx: NodeContext, text: str, prefix: str) -> dict[str, Any]:
    path = write_new_output(ctx.out_dir, prefix, ".txt", lambda tmp: tmp.write_text(text, encoding="utf-8"))
    ctx.wrote_file(path)
    return {}


def _run_show_text(ctx: NodeContext, text: str) -> dict[str, Any]:
    ctx.text(text, final=True)
    return {}


def _run_load_image(ctx: NodeContext, path: str) -> dict[str, Any]:
    from nodes.png import alpha_mask, pil_to_tensor
    from pipelines.paths import builtin_image_path

    # builtin:NAME is a picture shipped in resources/images (the example workflows' inputs), never outside.
    file = builtin_image_path(path) if path.startswith("builtin:") else Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"field 'path': no image at {file}")

    with Image.open(file) as image:
        return {"image": pil_to_tensor(image), "mask": alpha_mask(image)}


def _run_save_image(ctx: NodeContext, image: Any, prefix: str) -> dict[str, Any]:
    from nodes.png import save_png_with_workflow, tensor_to_pil  # torch: only when a node runs

    for picture in tensor_to_pil(image):
        path = write_new_output(
            ctx.out_dir,
            prefix,
            ".png",
            lambda tmp, picture=picture: save_png_with_workflow(picture, tmp, ctx.workflow_json),
        )
        ctx.wrote_file(path)
        ctx.preview(picture, final=True)
    return {}


def _run_preview_image(ctx: NodeContext, image: Any) -> dict[str, Any]:
    from nodes.png import tensor_to_pil

    for picture in tensor_to_pil(image):
        ctx.preview(picture, final=True)
    return {}


NODES: tuple[NodeSpec, ...] = (
    NodeSpec(
        type="Text",
        tags=("PrimitiveStringMultiline", "PrimitiveString"),
        title="Text",
        category="primitives",
        run=_run_text,
        params=[Param("text", "text", default="", help="Any text; multi-line.")],
        outputs=[Output("text", TEXT)],
        description="A piece of text typed in the node.",
    ),
    NodeSpec(
        type="Int",
        tags=("PrimitiveInt",),
        title="Integer",
        category="primitives",
        run=_run_int,
        params=[Param("value", "int", default=0, min=-(2**31), max=2**31 - 1)],
        outputs=[Output("value", INT)],
        description="A whole number.",
    ),
    NodeSpec(
        type="Float",
        tags=("PrimitiveFloat",),
        title="Float",
        category="primitives",
        run=_run_float,
        params=[Param("value", "float", default=0.0, step=0.1)],
        outputs=[Output("value", FLOAT)],
        description="A decimal number.",
    ),
    NodeSpec(
        type="Bool",
        tags=("PrimitiveBoolean",),
        title="Boolean",
        category="primitives",
        run=_run_bool,
        params=[Param("value", "bool", default=False)],
        outputs=[Output("value", BOOL)],
        description="True or false.",
    ),
    NodeSpec(
        type="Seed",
        title="Seed",
        category="primitives",
        run=_run_seed,
        params=[
            Param(
                "seed",
                "seed",
                default=0,
                min=0,
                max=SEED_MAX,
                help="Random seed; the same seed gives the same picture.",
            )
        ],
        outputs=[Output("seed", INT)],
        description="A random seed to share between samplers.",
    ),
    NodeSpec(
        type="FormatText",
        title="Format Text",
        category="text",
        run=_run_format,
        inputs=[
            Input("a", TEXT, optional=True),
            Input("b", TEXT, optional=True),
            Input("c", TEXT, optional=True),
        ],
        params=[
            Param(
                "template",
                "text",
                default="{a}",
                help="Python format string using {a}, {b}, {c}.",
                validate=template_problem,
            )
        ],
        outputs=[Output("text", TEXT)],
        description="Fill a template with up to three texts.",
    ),
    NodeSpec(
        type="Concatenate",
        title="Concatenate",
        category="text",
        run=_run_concat,
        inputs=[Input("a", TEXT), Input("b", TEXT)],
        params=[Param("separator", "string", default=" ")],
        outputs=[Output("text", TEXT)],
        description="Join two texts with a separator.",
    ),
    NodeSpec(
        type="SaveText",
        title="Save Text",
        category="output",
        run=_run_save_text,
        is_output=True,
        inputs=[Input("text", TEXT)],
        params=[
            Param(
                "prefix",
                "string",
                default="text",
                help="File name prefix; a number follows.",
                validate=prefix_problem,
            )
        ],
        description="Write the text to a numbered .txt file in the output folder.",
    ),
    NodeSpec(
        type="ShowText",
        title="Show Text",
        category="output",
        run=_run_show_text,
        is_output=True,
        inputs=[Input("text", TEXT)],
        description="Show the text in the output panel.",
    ),
    NodeSpec(
        type="LoadImage",
        tags=("img2img",),
        title="Load Image",
        category="image",
        run=_run_load_image,
        params=[Param("path", "path", default="", file_filter="Images (*.png *.jpg *.jpeg *.webp)")],
        outputs=[Output("image", IMAGE), Output("mask", MASK)],
        description="Read an image file; its alpha channel becomes the mask (transparent = repaint).",
    ),
    NodeSpec(
        type="SaveImage",
        title="Save Image",
        category="output",
        run=_run_save_image,
        is_output=True,
        inputs=[Input("image", IMAGE)],
        params=[
            Param(
                "prefix",
                "string",
                default="nodeloom",
                help="File name prefix; a number follows.",
                validate=prefix_problem,
            )
        ],
        description="Write numbered PNGs (never overwriting) with the workflow embedded.",
    ),
    NodeSpec(
        type="PreviewImage",
        title="Preview Image",
        category="output",
        run=_run_preview_image,
        is_output=True,
        inputs=[Input("image", IMAGE)],
        description="Show the image without saving it.",
    ),
)
