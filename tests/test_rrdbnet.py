"""ESRGAN's RRDBNet read natively: the same output as spandrel (ComfyUI's upscaler library), from every layout.

spandrel is a test-only reference here, installed --no-deps by the Makefile: it imports torchvision at import
(for its LaMa and RestoreFormer architectures), and PyPI's torchvision wheel needs the CUDA torch, so this
test puts a stand-in for those two torchvision functions in `sys.modules` while it imports spandrel; the
ESRGAN code it compares against never calls them.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from memory import MemoryConfig, MemoryManager
from pipelines.image.rrdbnet import RRDBNet, rrdbnet_dims, rrdbnet_from_state_dict


def _released_keys(model: RRDBNet) -> dict[str, torch.Tensor]:
    """The module's tensors under BasicSR's names (conv_up1, conv_up2: the released files' layout)."""
    out = {}
    for key, value in model.state_dict().items():
        if key.startswith("conv_ups."):
            _, index, rest = key.split(".", 2)
            key = f"conv_up{int(index) + 1}.{rest}"
        out[key] = value.clone()
    return out


def _tiny(seed: int = 0, **kwargs: Any) -> RRDBNet:
    """Real-ESRGAN's shape with fewer features and blocks (spandrel assumes 32 growth channels, as every
    released ESRGAN file has)."""
    torch.manual_seed(seed)
    return RRDBNet(num_feat=16, num_block=2, num_grow_ch=32, **kwargs).eval()


@pytest.fixture
def spandrel() -> Iterator[types.ModuleType]:
    import importlib

    functional = types.ModuleType("torchvision.transforms.functional")
    functional.InterpolationMode = type("InterpolationMode", (), {})  # type: ignore[attr-defined]
    functional.rotate = functional.normalize = None  # type: ignore[attr-defined]
    transforms = types.ModuleType("torchvision.transforms")
    transforms.functional = functional  # type: ignore[attr-defined]
    vision = types.ModuleType("torchvision")
    vision.transforms = transforms  # type: ignore[attr-defined]
    before = set(sys.modules)
    stand_ins = {
        "torchvision": vision,
        "torchvision.transforms": transforms,
        "torchvision.transforms.functional": functional,
    }
    missing = [name for name in stand_ins if name not in sys.modules]
    sys.modules.update({k: v for k, v in stand_ins.items() if k in missing})
    try:
        yield importlib.import_module("spandrel")
    finally:
        # spandrel and the stand-ins go (other tests see no torchvision); anything else spandrel pulled in
        # stays, as a torch submodule imported twice would register its operators twice.
        for name in set(sys.modules) - before:
            if name.split(".")[0] in ("spandrel", "torchvision"):
                del sys.modules[name]


# Same arithmetic in the same order as spandrel's module (both are BasicSR's RRDBNet); 1e-5 on outputs of
# magnitude ~1 leaves room only for oneDNN picking another convolution kernel between the two calls.
_SAME = 1e-5


@pytest.mark.parametrize(
    ("unshuffle", "num_up", "scale"),
    [(1, 2, 4), (2, 2, 2), (4, 2, 1), (1, 3, 8)],  # Real-ESRGAN x4plus, x2plus, x1; an 8x ESRGAN
)
def test_rrdbnet_matches_spandrel_from_the_released_layout(spandrel, unshuffle, num_up, scale) -> None:
    state = _released_keys(_tiny(num_up=num_up, unshuffle=unshuffle))
    reference = spandrel.ModelLoader().load_from_state_dict(dict(state))
    ours = rrdbnet_from_state_dict(dict(state))
    assert ours.scale == reference.scale == scale
    pixels = torch.rand(1, 3, 21, 18, generator=torch.Generator().manual_seed(3))  # odd: reflect-padded
    with torch.no_grad():
        expected, got = reference.model.eval()(pixels), ours(pixels)
    assert got.shape == expected.shape == (1, 3, 21 * scale, 18 * scale)
    assert (got - expected).abs().max().item() <= _SAME


def test_rrdbnet_reads_the_classic_esrgan_layout(spandrel) -> None:
    """ESRGAN's original `model.N` files (most community 4x models): spandrel's own module holds that layout."""
    reference = spandrel.ModelLoader().load_from_state_dict(_released_keys(_tiny(seed=1)))
    classic = reference.model.state_dict()
    assert "model.1.sub.0.RDB1.conv1.0.weight" in classic
    ours = rrdbnet_from_state_dict(dict(classic))
    pixels = torch.rand(2, 3, 16, 24, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert (ours(pixels) - reference.model.eval()(pixels)).abs().max().item() <= _SAME
    shapes = {k: tuple(v.shape) for k, v in classic.items()}
    assert rrdbnet_dims(shapes) == (16, 4)


def test_rrdbnet_dims_come_from_the_header_alone(tmp_path) -> None:
    from pipelines.image.upscale import load_upscale_model

    for unshuffle, scale in ((1, 4), (2, 2)):
        path = tmp_path / f"RealESRGAN_x{scale}plus.safetensors"
        save_file(_released_keys(_tiny(unshuffle=unshuffle)), str(path))
        mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
        try:
            ref = load_upscale_model(mm, path)
            assert (ref.feature_width, ref.scale) == (16, scale)
            # The ledger knows the file's bytes from the same header, before any tensor is read.
            assert ref.handle.weight_bytes == path.stat().st_size - 8 - _header_length(path)
        finally:
            mm.close()


def test_upscale_node_runs_a_real_esrgan_file_without_spandrel(tmp_path, monkeypatch) -> None:
    """What a CPU user without the extra gets: the template's RealESRGAN_x4plus file upscales, tiled."""
    from nodes.executor import Executor
    from nodes.registry import default_registry
    from nodes.workflow import workflow_from_dict

    monkeypatch.setitem(sys.modules, "spandrel", None)  # as if it were not installed
    model = _tiny(seed=2)
    path = tmp_path / "RealESRGAN_x4plus.safetensors"
    save_file(_released_keys(model), str(path))
    picture = tmp_path / "in.png"
    _write_picture(picture)
    data = {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "load": {"type": "LoadImage", "params": {"path": str(picture)}},
            "upscaler": {"type": "LoadUpscaleModel", "params": {"path": str(path)}},
            "upscale": {
                "type": "UpscaleImage",
                "params": {"tile": 32, "overlap": 8},
                "inputs": {"upscale_model": ["upscaler", "upscale_model"], "image": ["load", "image"]},
            },
            "save": {
                "type": "SaveImage",
                "params": {"prefix": "big"},
                "inputs": {"image": ["upscale", "image"]},
            },
        },
    }
    registry = default_registry(entry_point_packs=False)
    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    try:
        result = Executor(registry, memory=mm).run(
            workflow_from_dict(data, registry), out_dir=tmp_path / "out"
        )
    finally:
        mm.close()
    assert result.ok, result.error
    (saved,) = sorted((tmp_path / "out").glob("*.png"))
    import numpy as np
    from PIL import Image

    with Image.open(saved) as big, Image.open(picture) as small:
        assert big.size == (small.width * 4, small.height * 4)
        pixels = torch.from_numpy(np.asarray(small.convert("RGB"), dtype=np.float32) / 255).permute(2, 0, 1)
        got = np.asarray(big.convert("RGB"), dtype=np.int16)
    with torch.no_grad():
        whole = model(pixels[None]).clamp(0, 1)[0].permute(1, 2, 0).numpy()
    expected = np.round(whole * 255).astype(np.int16)
    # Tiles of 32 px with 8 px overlaps: away from the seams the tiled picture is the untiled one; at the
    # seams the blend of two tiles' values (each exact where its tile saw the picture) stays within 1/255
    # plus the PNG's rounding, as tests/test_image_conditioning.py checks for the tiler itself.
    assert np.abs(got - expected).max() <= 2


def _header_length(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[:8], "little")


def _write_picture(path: Path) -> None:
    import numpy as np
    from PIL import Image

    ys, xs = np.mgrid[0:40, 0:56]
    rgb = np.stack([xs * 4, ys * 6, np.full_like(xs, 90)], -1).astype(np.uint8)
    Image.fromarray(rgb).save(path)


def test_an_upscaler_file_is_read_by_its_bytes_not_its_name(tmp_path) -> None:
    from pipelines.image.upscale import load_upscale_model
    from pipelines.paths import UnsafeFormatError

    state = _released_keys(_tiny(seed=3))
    renamed = tmp_path / "RealESRGAN_x4plus.pth"  # safetensors under a pickle's name: read as safetensors
    save_file(state, str(renamed))
    disguised = tmp_path / "4x_disguised.safetensors"  # a pickle under a safetensors name: refused
    torch.save(state, str(disguised))
    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    try:
        ref = load_upscale_model(mm, renamed)
        assert (ref.feature_width, ref.scale) == (16, 4)  # its header was read
        with mm.use(ref.handle) as model:
            assert isinstance(model, RRDBNet)
        with pytest.raises(UnsafeFormatError, match="4x_disguised.safetensors"):
            load_upscale_model(mm, disguised)
    finally:
        mm.close()
