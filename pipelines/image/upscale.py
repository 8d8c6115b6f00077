"""Upscale models (ESRGAN family and the rest of what spandrel reads), run in overlapping tiles.

Lives here: `UpscaleModelRef`, `load_upscale_model`, `upscale_tiled`, `upscale_image`.
May import: stdlib, torch, safetensors, memory, pipelines.paths, pipelines.weight_format,
pipelines.image.rrdbnet; `spandrel` lazily (an optional extra).

ESRGAN's RRDBNet (Real-ESRGAN x4plus / x2plus, the file ComfyUI's templates name, and the classic ESRGAN
layout) is built here from its tensors (`pipelines.image.rrdbnet`), with no extra package. Every other
architecture comes from spandrel, the library ComfyUI uses: it reads a state dict and recognises the
architecture and its scale. spandrel needs torchvision, which has no CPU wheel on PyPI for every torch, so
it is the optional extra `nodeloom[upscale]`; without it, the loader says how to get it. The tiling is
ours and works for any image-to-image module: tiles of `tile` pixels overlap by `overlap`, each tile's
output is blended into the picture with weights that ramp across the overlap (the outer quarter, which
saw padding instead of picture, is dropped), so a pixel far from every tile border gets exactly the
untiled value. A tile that runs out of memory is retried at
half the size (down to 32 px), and the report says which tile size finished.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from memory import ComponentSpec, MemoryManager, ModelHandle
from pipelines.model_keys import component_keys
from pipelines.paths import check_weights_format
from pipelines.weight_format import WeightFormat, load_pickle_state_dict

MIN_TILE = 32


@dataclass(frozen=True)
class UpscaleModelRef:
    handle: ModelHandle
    path: Path
    # What the working-memory formula needs, from the file's header where it is an RRDBNet's (else
    # Real-ESRGAN x4plus's values, an estimate the measured peak replaces after the first run).
    feature_width: int = 64
    scale: int = 4


class UpscalerUnavailable(RuntimeError):
    pass


def _read_state_dict(path: Path, allow_pickle: bool) -> dict[str, torch.Tensor]:
    # By the file's bytes, not its name: a `.pth` that is safetensors reads as safetensors, a pickle named
    # `.safetensors` is refused (or, with the user's opt-in, unpickled) by the one pickle loader.
    fmt = check_weights_format(path, allow_pickle=allow_pickle)
    if fmt is WeightFormat.SAFETENSORS:
        from safetensors.torch import load_file

        return load_file(str(path))
    if fmt is WeightFormat.GGUF:
        raise ValueError(f"{path.name}: a GGUF file is not an upscale model (use its .safetensors)")
    return load_pickle_state_dict(path, allow_pickle=allow_pickle)


def _build(path: Path, allow_pickle: bool) -> torch.nn.Module:
    """RRDBNet files natively; anything else (or an RRDB variant this reader does not know) via spandrel."""
    from pipelines.image.rrdbnet import is_rrdbnet, rrdbnet_from_state_dict

    state = _read_state_dict(path, allow_pickle)
    native_error: Exception | None = None
    if is_rrdbnet(set(state)):
        try:
            return rrdbnet_from_state_dict(state)
        except (KeyError, RuntimeError, ValueError) as exc:  # e.g. ESRGAN+ or an odd upsampler: spandrel's
            native_error = exc
    try:
        import spandrel
    except ImportError as exc:  # spandrel missing, or its torchvision import failing
        known = f" (read as ESRGAN, it failed: {native_error})" if native_error else ""
        raise UpscalerUnavailable(
            f"{path.name}: this upscale model's architecture is not ESRGAN's RRDBNet{known}; other "
            f"architectures load through the 'spandrel' package, which is not usable here "
            f"({type(exc).__name__}: {exc}). Install it with: pip install 'nodeloom[upscale]'"
        ) from exc
    descriptor = spandrel.ModelLoader().load_from_state_dict(state)
    if not isinstance(descriptor, spandrel.ImageModelDescriptor):
        raise ValueError(f"{path.name}: {descriptor.architecture.name} is not an image-to-image model")
    return descriptor.model.eval()


def load_upscale_model(mm: MemoryManager, path: Path, *, allow_pickle: bool = False) -> UpscaleModelRef:
    """Register the model lazily; its architecture is recognised when it is first used (the manager reports
    the bytes before and after it is read)."""
    if not path.is_file():
        raise FileNotFoundError(f"field 'path': no upscale model at {path}")
    fmt = check_weights_format(path, allow_pickle=allow_pickle)
    files = (path,) if fmt is WeightFormat.SAFETENSORS else ()
    dims = _header_dims(path) if files else None
    handle = mm.register(
        ComponentSpec(
            **component_keys(path, "upscaler", files=files).spec_fields(),
            name=path.stem,
            kind="upscaler",
            build=lambda: _build(path, allow_pickle),
            files=files,
        )
    )
    if dims is None:
        return UpscaleModelRef(handle=handle, path=path)
    return UpscaleModelRef(handle=handle, path=path, feature_width=dims[0], scale=dims[1])


def _header_dims(path: Path) -> tuple[int, int] | None:
    from safetensors import safe_open

    from pipelines.image.rrdbnet import rrdbnet_dims

    with safe_open(str(path), framework="pt") as f:
        shapes = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
    return rrdbnet_dims(shapes)


def _ramp(length: int, overlap: int, at_start: bool, at_end: bool) -> torch.Tensor:
    """1-D blend weights of one tile. On a side with a neighbour, the outer quarter of the overlap is
    dropped (those pixels saw zero padding instead of picture) and the rest ramps linearly up to 1."""
    w = torch.ones(length)
    margin = overlap // 4
    span = overlap - margin
    if span > 0:
        ramp = torch.cat([torch.zeros(margin), (torch.arange(span, dtype=torch.float32) + 1) / (span + 1)])
        if not at_start:
            w[:overlap] = ramp
        if not at_end:
            w[-overlap:] = ramp.flip(0)
    return w


def _starts(size: int, tile: int, overlap: int) -> list[int]:
    if size <= tile:
        return [0]
    stride = tile - overlap
    starts = list(range(0, size - tile, stride))
    return [*starts, size - tile]


@torch.no_grad()
def upscale_tiled(
    model: Callable[[torch.Tensor], torch.Tensor], pixels: torch.Tensor, tile: int, overlap: int
) -> torch.Tensor:
    """(B, C, H, W) in [0, 1] -> (B, C, H*s, W*s), tile by tile with blended overlaps."""
    batch, _, height, width = pixels.shape
    overlap = min(overlap, tile // 2)
    out: torch.Tensor | None = None
    weight: torch.Tensor | None = None
    scale = 0
    ys, xs = _starts(height, tile, overlap), _starts(width, tile, overlap)
    for y in ys:
        for x in xs:
            part = pixels[:, :, y : y + tile, x : x + tile]
            result = model(part)
            if out is None:
                scale = result.shape[-1] // part.shape[-1]
                out = torch.zeros(batch, result.shape[1], height * scale, width * scale, dtype=result.dtype)
                weight = torch.zeros(1, 1, height * scale, width * scale, dtype=result.dtype)
            assert weight is not None
            th, tw = part.shape[-2] * scale, part.shape[-1] * scale
            wy = _ramp(th, overlap * scale, y == ys[0], y == ys[-1])
            wx = _ramp(tw, overlap * scale, x == xs[0], x == xs[-1])
            w = (wy[:, None] * wx[None, :]).to(result.dtype)
            oy, ox = y * scale, x * scale
            out[:, :, oy : oy + th, ox : ox + tw] += result.cpu() * w
            weight[:, :, oy : oy + th, ox : ox + tw] += w
    assert out is not None and weight is not None
    return out / weight


def _working_bytes(tile: int, channels: int = 64, scale: int = 4) -> int:
    # ESRGAN's peak is its last upsampling stage: `channels` features at the output's size, three to four
    # copies alive (the interpolated map, the conv's output, the activation); measured on Real-ESRGAN
    # x4plus / x2plus / x1 and an 8x RRDBNet at 96-256 px tiles, float32: 218-269 floats per output pixel
    # with 64 features, so 4 * channels + 16 is never below them and at most 1.25x above. For other
    # architectures (spandrel's) it is an estimate the manager replaces by the measured peak after a run.
    return 4 * (tile * scale) ** 2 * (4 * channels + 16)


def _runner(model: torch.nn.Module, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    """Tiles go in as the model's device and dtype and come back float32 in [0, 1]."""
    param = next(model.parameters(), None)
    device = param.device if param is not None else device
    dtype = param.dtype if param is not None else torch.float32

    def run(part: torch.Tensor) -> torch.Tensor:
        return model(part.to(device=device, dtype=dtype)).float().clamp(0, 1)

    return run


def upscale_image(
    mm: MemoryManager, ref: UpscaleModelRef, image: torch.Tensor, *, tile: int = 512, overlap: int = 32
) -> tuple[torch.Tensor, int]:
    """IMAGE (B, H, W, C) -> upscaled IMAGE, and the tile size that finished (smaller after an OOM)."""
    pixels = image[..., :3].permute(0, 3, 1, 2).contiguous()
    while True:
        try:
            with mm.use(
                ref.handle, working_bytes=_working_bytes(tile, ref.feature_width, ref.scale)
            ) as model:
                result = upscale_tiled(_runner(model, mm.device), pixels, tile, overlap)
            return result.permute(0, 2, 3, 1).contiguous(), tile
        except (torch.OutOfMemoryError, MemoryError, RuntimeError) as exc:
            if not mm.is_oom(exc) or tile <= MIN_TILE:
                raise
            tile = max(MIN_TILE, tile // 2)
