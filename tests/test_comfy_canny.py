"""ComfyUI's Canny node: our CannyEdgesComfy draws its edges (checked against a per-pixel re-write of the steps in
ComfyUI's comfy_extras/nodes_canny.py), and ComfyUI's Canny templates import onto it and check clean. The template
test skips without ComfyUI's template package."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from pipelines.image.canny_comfy import canny_edges

_NEIGHBOURS = ((0, 1), (1, 1), (1, 0), (1, -1), (0, -1), (-1, -1), (-1, 0), (-1, 1))


def _reference(rgb: np.ndarray, low: float, high: float) -> np.ndarray:
    """ComfyUI's Canny, one pixel at a time in float64: (H, W, 3) in [0, 1] -> (H, W) of 0/1."""
    h, w, _ = rgb.shape
    gray = rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114
    x = np.linspace(-2.0, 2.0, 5)
    g = np.exp(-0.5 * x**2)
    g /= g.sum()
    padded = np.pad(gray, 2, mode="reflect")
    blurred = np.zeros((h, w))
    for i in range(h):
        for j in range(w):
            blurred[i, j] = sum(g[a] * g[b] * padded[i + a, j + b] for a in range(5) for b in range(5))
    edge = np.pad(blurred, 1, mode="edge")
    gx = np.zeros((h, w))
    gy = np.zeros((h, w))
    sobel = np.array([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]])
    for i in range(h):
        for j in range(w):
            window = edge[i : i + 3, j : j + 3]
            gx[i, j] = (window * sobel).sum()
            gy[i, j] = (window * sobel.T).sum()
    mag = np.sqrt(gx * gx + gy * gy + 1e-6)
    kept = np.zeros((h, w))
    for i in range(h):
        for j in range(w):
            k = int(round(180.0 * math.atan2(gy[i, j], gx[i, j]) / math.pi / 45)) % 8
            dy, dx = _NEIGHBOURS[k]

            def at(y: int, x_: int) -> float:
                return mag[y, x_] if 0 <= y < h and 0 <= x_ < w else 0.0

            if mag[i, j] > at(i + dy, j + dx) and mag[i, j] > at(i - dy, j - dx):
                kept[i, j] = mag[i, j]
    strong = kept > high
    weak = (kept > low) & ~strong
    stack = list(zip(*np.nonzero(strong), strict=True))
    while stack:  # hysteresis: flood from the strong pixels through 8-connected weak ones
        i, j = stack.pop()
        for di in (-1, 0, 1):
            for dj in (-1, 0, 1):
                y, x_ = i + di, j + dj
                if 0 <= y < h and 0 <= x_ < w and weak[y, x_] and not strong[y, x_]:
                    strong[y, x_] = True
                    stack.append((y, x_))
    return strong.astype(np.float64)


def test_edges_match_a_per_pixel_rewrite_of_comfyuis_canny() -> None:
    g = torch.Generator().manual_seed(3)
    noise = torch.rand(1, 24, 32, 3, generator=g) * 0.2
    yy, xx = torch.meshgrid(torch.arange(24), torch.arange(32), indexing="ij")
    disc = (((yy - 11) ** 2 + (xx - 15) ** 2) < 64).float()[None, ..., None]  # a shape with edges all round
    image = (0.2 + 0.6 * disc + noise).clamp(0, 1)
    ours = canny_edges(image, 0.1, 0.3)
    assert ours.shape == image.shape and torch.equal(ours[..., 0], ours[..., 2])
    expected = _reference(image[0].double().numpy(), 0.1, 0.3)
    got = ours[0, ..., 0].numpy()
    assert 20 < expected.sum() < 24 * 32 / 2  # some edges, not everything: the comparison means something
    # float32 convolutions against a float64 loop: a pixel may flip only where a magnitude ties its neighbour or
    # a threshold to within rounding; none did here, a handful would still be the same algorithm
    assert (got != expected).sum() <= 3


def test_a_vertical_step_gives_a_one_pixel_line() -> None:
    image = torch.zeros(1, 16, 16, 3)
    image[:, :, 8:] = 1.0
    edges = canny_edges(image, 0.4, 0.8)[0, ..., 0]
    columns = edges.sum(dim=0)
    assert columns.max() == 16 and (columns > 0).sum() == 1  # one full column: NMS thins the ramp to a line


def test_comfyuis_canny_templates_import_onto_it_and_check_clean(registry) -> None:
    pytest.importorskip(
        "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
    )
    from benchmarks.comfy_templates import templates_folder
    from nodes.comfy.sources import check_comfy, import_comfy_data

    name = "image_qwen_image_union_control_lora"
    data = json.loads((templates_folder() / f"{name}.json").read_text(encoding="utf-8"))
    result = import_comfy_data(data, registry, name, title=name)
    assert result.unsupported == [] and check_comfy(result, registry, name) == []
    (canny,) = [n for n in result.workflow["nodes"].values() if n["type"] == "CannyEdgesComfy"]
    widgets = next(n["widgets_values"] for n in data["nodes"] if n["type"] == "Canny")
    assert [canny["params"]["low_threshold"], canny["params"]["high_threshold"]] == widgets[:2]
    # exported back, it is ComfyUI's Canny with the same thresholds
    from nodes.comfy.export import export_api
    from nodes.workflow import workflow_from_dict

    prompt = export_api(workflow_from_dict(result.workflow, registry), registry)
    (exported,) = [v for v in prompt.values() if v["class_type"] == "Canny"]
    assert [exported["inputs"]["low_threshold"], exported["inputs"]["high_threshold"]] == widgets[:2]
    assert isinstance(exported["inputs"]["image"], list)  # still wired to its picture
