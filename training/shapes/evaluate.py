"""Automatic evaluation of the shapes model on its held-out (colour, shape, background) triples.

Holds the pixel-statistics judge (``measure_scene``: background, shape colour, shape class, position of a
picture; ``score``: which asked-for attributes a measurement satisfies), the goals, and the evaluation run
that generates the held-out prompts with diffusers' ``StableDiffusionPipeline`` (float32, CPU, DPM++ 2M)
and writes ``eval.json`` and ``contact_sheet.png`` into the model folder.

    python -m training.shapes.evaluate resources/models/shapes-sd [--seeds 4 --cfg 4 --steps 20]

May import only numpy, PIL, torch, diffusers and this package (never ``nodes``/``app``/Qt); the judge
itself needs only numpy and PIL.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from training.shapes.scenes import PALETTE, held_out_prompts

PALETTE_NAMES = list(PALETTE)
PALETTE_RGB = np.array([PALETTE[n] for n in PALETTE_NAMES], dtype=np.float32)
GOALS: dict[str, float] = {"background": 0.95, "colour": 0.85, "shape": 0.75, "position": 0.60}
# Fill ratio of a shape's bounding box: triangle 0.5, circle pi/4 ~ 0.79, square 1; cut half-way.
TRIANGLE_MAX_FILL = 0.64
CIRCLE_MAX_FILL = 0.89
# Mean width of the top third over the bottom third: ~0.2 for the upward triangle, ~1 for circle and square.
# The decoder rounds a small triangle's corners, which lifts its fill ratio into the circle range (measured on
# VAE round trips: 0.60-0.76), but its taper survives (0.27-0.56), so the taper decides "triangle".
TRIANGLE_MAX_TAPER = 0.6
# Circle vs square by fill, cut a little lower than half-way: blur trims a small square's corners (VAE round
# trips: small squares 0.83-0.98, small circles 0.78-0.94, crisp circles <= 0.79).
SQUARE_MIN_FILL = 0.88
# Small shapes are ~16 px wide and large ones ~28 px at 64 px; cut half-way (as a fraction of the width).
SMALL_MAX_EXTENT = 22 / 64


def _nearest(rgb: np.ndarray) -> np.ndarray:
    """Index of the nearest palette colour for each RGB row."""
    d = ((rgb[..., None, :].astype(np.float32) - PALETTE_RGB) ** 2).sum(-1)
    return d.argmin(-1)


def _largest_component(mask: np.ndarray) -> np.ndarray:
    """Largest 4-connected region of ``mask`` (ignores specks of sampling noise away from the shape)."""
    h, w = mask.shape
    labels = np.zeros((h, w), dtype=np.int32)
    best, best_size, current = 0, 0, 0
    for y, x in zip(*np.nonzero(mask), strict=True):
        if labels[y, x]:
            continue
        current += 1
        labels[y, x] = current
        queue, size = deque([(y, x)]), 0
        while queue:
            cy, cx = queue.popleft()
            size += 1
            for ny, nx in ((cy - 1, cx), (cy + 1, cx), (cy, cx - 1), (cy, cx + 1)):
                if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not labels[ny, nx]:
                    labels[ny, nx] = current
                    queue.append((ny, nx))
        if size > best_size:
            best, best_size = current, size
    return labels == best if best else np.zeros_like(mask)


def measure_scene(image: Image.Image) -> dict[str, Any]:
    """Read a single-shape picture with pixel statistics.

    Returns ``background`` (palette name of the border's dominant colour), ``colour`` (nearest palette
    colour of the shape pixels' median), ``shape`` (triangle from the taper, else circle/square from the
    bounding-box fill ratio), ``position`` (left/center/right from the centroid), ``size`` (small/large from
    the bounding box), plus the raw ``fill``, ``taper``, ``centroid_x`` (0..1), ``extent`` (0..1) and
    ``pixels``, and ``shape_fill_rule`` (the class from the fill ratio alone: <0.64 triangle, <0.89 circle,
    else square). Shape fields are None when no shape is found.
    """
    rgb = np.asarray(image.convert("RGB"), dtype=np.float32)
    h, w, _ = rgb.shape
    labels = _nearest(rgb)
    ring = max(1, w // 32)
    border = np.concatenate(
        [labels[:ring].ravel(), labels[-ring:].ravel(), labels[:, :ring].ravel(), labels[:, -ring:].ravel()]
    )
    bg = int(np.bincount(border, minlength=len(PALETTE_NAMES)).argmax())
    result: dict[str, Any] = {
        "background": PALETTE_NAMES[bg],
        "colour": None,
        "shape": None,
        "position": None,
        "size": None,
        "fill": None,
        "taper": None,
        "shape_fill_rule": None,
        "centroid_x": None,
        "extent": None,
        "pixels": 0,
    }
    rough = labels != bg
    if rough.sum() < 4:
        return result
    fg = int(_nearest(np.median(rgb[rough], axis=0))[()])
    if fg == bg:
        return result
    # Pixels closer to the shape colour than to the background: the half-way edge of a blurred shape.
    d_bg = ((rgb - PALETTE_RGB[bg]) ** 2).sum(-1)
    d_fg = ((rgb - PALETTE_RGB[fg]) ** 2).sum(-1)
    mask = _largest_component((d_fg < d_bg) & rough)
    ys, xs = np.nonzero(mask)
    if len(xs) < 4:
        return result
    box_w, box_h = xs.max() - xs.min() + 1, ys.max() - ys.min() + 1
    fill = float(len(xs) / (box_w * box_h))
    box = mask[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1]
    widths = box.sum(axis=1)
    third = max(1, box_h // 3)
    taper = float(widths[:third].mean() / max(widths[-third:].mean(), 1e-6))
    centroid_x = float((xs.mean() + 0.5) / w)
    extent = float(max(box_w, box_h) / w)
    fill_rule = "triangle" if fill < TRIANGLE_MAX_FILL else "circle" if fill < CIRCLE_MAX_FILL else "square"
    shape = "triangle" if taper < TRIANGLE_MAX_TAPER else "square" if fill >= SQUARE_MIN_FILL else "circle"
    position = "left" if centroid_x < 0.375 else "right" if centroid_x > 0.625 else "center"
    result.update(
        colour=PALETTE_NAMES[fg],
        shape=shape,
        position=position,
        fill=round(fill, 3),
        taper=round(taper, 3),
        shape_fill_rule=fill_rule,
        size="small" if extent < SMALL_MAX_EXTENT else "large",
        centroid_x=round(centroid_x, 3),
        extent=round(extent, 3),
        pixels=int(len(xs)),
    )
    return result


def score(prompt_attributes: dict[str, Any], measurement: dict[str, Any]) -> dict[str, bool]:
    """Which asked-for attributes the picture shows; ``position``/``size`` only when the prompt names one."""
    checks = {
        key: measurement.get(key) == prompt_attributes.get(key) for key in ("background", "colour", "shape")
    }
    for key in ("position", "size"):
        if prompt_attributes.get(key):
            checks[key] = measurement.get(key) == prompt_attributes[key]
    return checks


def summarize(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Accuracy per attribute over the records that were checked for it."""
    table: dict[str, dict[str, float]] = {}
    for key in ("background", "colour", "shape", "position", "size"):
        hits = [r["checks"][key] for r in records if key in r["checks"]]
        if hits:
            table[key] = {"accuracy": round(sum(hits) / len(hits), 4), "n": len(hits)}
            if key in GOALS:
                table[key]["goal"] = GOALS[key]
                table[key]["met"] = table[key]["accuracy"] >= GOALS[key]
    # Shape class per asked shape (no goal): where the overall figure comes from.
    for shape in ("circle", "square", "triangle"):
        hits = [r["checks"]["shape"] for r in records if r["asked"]["shape"] == shape]
        if hits:
            table[f"shape:{shape}"] = {"accuracy": round(sum(hits) / len(hits), 4), "n": len(hits)}
    # For comparison only: the shape class by the fill ratio alone, without the taper test.
    fill_hits = [r["measured"].get("shape_fill_rule") == r["asked"]["shape"] for r in records]
    if fill_hits:
        table["shape_fill_rule"] = {
            "accuracy": round(sum(fill_hits) / len(fill_hits), 4),
            "n": len(fill_hits),
        }
    return table


def load_pipeline(folder: Path):  # noqa: ANN201 - diffusers is imported lazily so the judge stays light
    import torch
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def generate(
    pipe: Any, prompt: str, seeds: list[int], steps: int = 20, cfg: float = 4.0
) -> list[Image.Image]:
    """One image per seed; a per-image generator makes each seed's picture independent of batching."""
    import torch

    generators = [torch.Generator().manual_seed(s) for s in seeds]
    return pipe(
        prompt,
        num_inference_steps=steps,
        guidance_scale=cfg,
        num_images_per_prompt=len(seeds),
        generator=generators,
    ).images


def contact_sheet(
    rows: list[list[tuple[Image.Image, bool]]], row_labels: list[str], col_labels: list[str], scale: int = 2
) -> Image.Image:
    """Grid of NEAREST-upscaled tiles with labels; a green/red frame marks all-checks-pass or a miss."""
    from PIL import ImageDraw, ImageFont

    tile = 64 * scale
    pad, left, top = 4, 190, 28
    cols = max(len(r) for r in rows)
    sheet = Image.new(
        "RGB", (left + cols * (tile + 2 * pad), top + len(rows) * (tile + 2 * pad)), (40, 40, 40)
    )
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    for j, label in enumerate(col_labels):
        draw.text((left + j * (tile + 2 * pad) + pad, 8), label, fill=(230, 230, 230), font=font)
    for i, (row, label) in enumerate(zip(rows, row_labels, strict=True)):
        y = top + i * (tile + 2 * pad)
        for k, line in enumerate(label.split("\n")):
            draw.text((6, y + pad + 14 * k), line, fill=(230, 230, 230), font=font)
        for j, (image, ok) in enumerate(row):
            x = left + j * (tile + 2 * pad)
            draw.rectangle(
                (x, y, x + tile + 2 * pad - 1, y + tile + 2 * pad - 1),
                outline=(60, 200, 60) if ok else (220, 50, 50),
                width=2,
            )
            sheet.paste(image.convert("RGB").resize((tile, tile), Image.NEAREST), (x + pad, y + pad))
    return sheet


def evaluate(
    folder: Path,
    seeds: int = 4,
    steps: int = 20,
    cfg: float = 4.0,
    write: bool = True,
    threads: int = 2,
    limit: int | None = None,
    first_seed: int = 0,
) -> dict[str, Any]:
    """Generate every held-out prompt with ``seeds`` seeds, judge them, print and save the results.

    ``limit`` keeps only the first prompts (a smoke run); ``threads`` 1 is much faster on a shared CPU;
    ``first_seed`` picks another set of seeds (a second opinion on the same prompts, with other noise).
    """
    import torch

    torch.set_num_threads(threads)
    pipe = load_pipeline(folder)
    prompts = held_out_prompts()[:limit]
    seed_list = list(range(first_seed, first_seed + seeds))
    records: list[dict[str, Any]] = []
    images: dict[str, list[Image.Image]] = {}
    start = time.time()
    for item in prompts:
        images[item["prompt"]] = generate(pipe, item["prompt"], seed_list, steps, cfg)
        for seed, image in zip(seed_list, images[item["prompt"]], strict=True):
            m = measure_scene(image)
            records.append(
                {
                    "prompt": item["prompt"],
                    "seed": seed,
                    "asked": item,
                    "measured": m,
                    "checks": score(item, m),
                }
            )
    seconds = time.time() - start
    table = summarize(records)
    print(f"held-out evaluation: {len(records)} images, {steps} steps DPM++ 2M, cfg {cfg}, {seconds:.0f}s")
    print(f"{'attribute':<12}{'accuracy':>10}{'goal':>8}{'n':>6}  met")
    for key, row in table.items():
        goal = f"{row['goal']:.0%}" if "goal" in row else "-"
        met = ("yes" if row["met"] else "NO") if "met" in row else "(info)"
        print(f"{key:<12}{row['accuracy']:>10.1%}{goal:>8}{row['n']:>6}  {met}")
    result = {
        "settings": {
            "scheduler": "DPMSolverMultistepScheduler (DPM++ 2M)",
            "steps": steps,
            "cfg": cfg,
            "seeds": seed_list,
            "dtype": "float32",
            "device": "cpu",
        },
        "table": table,
        "seconds": round(seconds, 1),
        "records": records,
    }
    if write:
        (folder / "eval.json").write_text(json.dumps(result, indent=1))
        write_sheet(folder / "contact_sheet.png", prompts, images, records, seed_list)
    return result


def write_sheet(
    path: Path,
    prompts: list[dict[str, Any]],
    images: dict[str, list[Image.Image]],
    records: list[dict[str, Any]],
    seed_list: list[int],
) -> None:
    """One row per held-out triple; columns are prompt variants x seeds."""
    ok = {(r["prompt"], r["seed"]): all(r["checks"].values()) for r in records}
    by_triple: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for item in prompts:
        by_triple.setdefault((item["colour"], item["shape"], item["background"]), []).append(item)
    rows, row_labels = [], []
    col_labels: list[str] = []
    for (colour, shape, background), items in by_triple.items():
        rows.append(
            [(images[i["prompt"]][k], ok[(i["prompt"], s)]) for i in items for k, s in enumerate(seed_list)]
        )
        row_labels.append(f"{colour} {shape}\non {background}")
        col_labels = [
            f"{i['size'] or ''} {i['position'] or ''}".strip() or "bare" for i in items for _ in seed_list
        ]
    col_labels = [
        f"{c}, seed {s}"
        for c, s in zip(col_labels, seed_list * (len(col_labels) // len(seed_list)), strict=True)
    ]
    sheet = contact_sheet(rows, row_labels, col_labels)
    # Adaptive 256-colour palette: the pictures are nearly flat, so this keeps the PNG small, near-lossless.
    sheet.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed+seeds-1")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cfg", type=float, default=4.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts (smoke run)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    evaluate(
        args.folder,
        seeds=args.seeds,
        steps=args.steps,
        cfg=args.cfg,
        write=not args.no_write,
        threads=args.threads,
        limit=args.limit,
        first_seed=args.first_seed,
    )


if __name__ == "__main__":
    main()
