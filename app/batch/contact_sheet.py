"""Contact sheets: every picture of a sweep in one grid, labelled by its swept values (HTML and PNG).

Lives here: `write_contact_sheet`. Imports PIL, `app.batch.worker`, `nodes.sweep`, `nodes.files`. No Qt.
Both files are written atomically: a sheet being rewritten is never seen half-written.

With two swept parameters the grid is a table (first parameter down, second across), as people lay out a
cfg x steps comparison; otherwise the pictures flow in rows in job order, each captioned with its values.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from app.batch.worker import IMAGE_SUFFIXES, JobResult
from nodes.files import atomic_write, atomic_write_text
from nodes.sweep import SweepAxis, SweepJob

THUMB = 192  # longest side of a tile in the PNG sheet
CAPTION = 14  # pixels of caption under a tile


def _first_image(result: JobResult, out_dir: Path) -> Path | None:
    for name in result.outputs:
        path = out_dir / Path(name).name
        if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file():
            return path
    return None


def _label(result: JobResult) -> str:
    return SweepJob(result.index, result.values).label or f"job {result.index}"


def _cell(result: JobResult | None, out_dir: Path) -> str:
    if result is None:
        return "<td></td>"
    image = _first_image(result, out_dir)
    label = html.escape(_label(result))
    if image is None:
        return f'<td class="{result.status}"><div class="none">{result.status}</div>{label}</td>'
    return (
        f'<td><a href="{html.escape(image.name)}"><img src="{html.escape(image.name)}"></a><br>{label}</td>'
    )


def _layout(results: list[JobResult], axes: list[SweepAxis]) -> list[list[JobResult | None]]:
    """Rows of the sheet: a table for two swept parameters (first down, second across), else square-ish."""
    by_values = {tuple(r.values.get(a.target) for a in axes): r for r in results}
    if len(axes) == 2 and len(by_values) == len(results):
        rows_axis, cols_axis = axes
        return [[by_values.get((rv, cv)) for cv in cols_axis.values] for rv in rows_axis.values]
    per_row = max(1, math.ceil(math.sqrt(len(results))))
    return [list(results[i : i + per_row]) for i in range(0, len(results), per_row)]


def _html(results: list[JobResult], axes: list[SweepAxis], out_dir: Path, title: str) -> str:
    rows = _layout(results, axes)
    table = (
        "<table>"
        + "".join("<tr>" + "".join(_cell(r, out_dir) for r in row) + "</tr>" for row in rows)
        + "</table>"
    )
    style = (
        "body{background:#222;color:#ddd;font:13px sans-serif}td{padding:4px;text-align:center;"
        "vertical-align:top}img{max-width:256px;image-rendering:pixelated}.failed{color:#f77}"
        ".none{width:128px;height:128px;line-height:128px;background:#333}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h3>{html.escape(title)}</h3>{table}</body></html>\n"
    )


def _png(results: list[JobResult], axes: list[SweepAxis], out_dir: Path) -> Image.Image:
    rows = _layout(results, axes)
    per_row = max(len(row) for row in rows)
    sheet = Image.new("RGB", (per_row * THUMB, len(rows) * (THUMB + CAPTION)), (34, 34, 34))
    draw = ImageDraw.Draw(sheet)
    for r, row in enumerate(rows):
        for c, result in enumerate(row):
            if result is None:
                continue
            x, y = c * THUMB, r * (THUMB + CAPTION)
            path = _first_image(result, out_dir)
            if path is not None:
                with Image.open(path) as picture:
                    tile = picture.convert("RGB")
                scale = THUMB / max(tile.size)
                # Nearest keeps tiny demo pictures crisp when they are scaled up.
                size = (max(1, round(tile.width * scale)), max(1, round(tile.height * scale)))
                tile = tile.resize(size, Image.NEAREST)
                sheet.paste(tile, (x + (THUMB - tile.width) // 2, y + (THUMB - tile.height) // 2))
            else:
                draw.text((x + THUMB // 3, y + THUMB // 2), result.status, fill=(255, 120, 120))
            draw.text((x + 3, y + THUMB + 1), _label(result)[:36], fill=(220, 220, 220))
    return sheet


def write_contact_sheet(
    results: list[JobResult], axes: list[SweepAxis], out_dir: Path, *, name: str = "sweep", title: str = ""
) -> dict[str, Any]:
    """Write `NAME.html` and `NAME.png` into `out_dir` when any job made a picture; returns their paths."""
    ordered = sorted(results, key=lambda r: r.index)
    if not any(_first_image(r, out_dir) for r in ordered):
        return {}
    html_path = out_dir / f"{name}.html"
    atomic_write_text(html_path, _html(ordered, axes, out_dir, title or name))
    out = {"html": str(html_path)}
    png_path = out_dir / f"{name}.png"
    sheet = _png(ordered, axes, out_dir)
    atomic_write(png_path, lambda tmp: sheet.save(tmp, format="PNG"))  # the temp name has no .png suffix
    out["png"] = str(png_path)
    return out
