"""ESRGAN's RRDBNet (Real-ESRGAN x4plus / x2plus and the classic ESRGAN files), built from a state dict.

Lives here: `RRDBNet`, `rrdbnet_from_state_dict`, `is_rrdbnet`.
May import: stdlib, torch.

Why a copy of a published architecture: every other upscaler goes through spandrel (the library ComfyUI
uses), but spandrel imports torchvision at import, and PyPI's torchvision wheels need the CUDA torch, so on a
CPU install it cannot load at all. RRDBNet is the one architecture ComfyUI's own templates name
(`RealESRGAN_x4plus.safetensors` in the Z-Image 2k upscaler and the GAN upscaler), and it is small. The
module follows BasicSR's `rrdbnet_arch.py` (its key names, so the released file loads as is) and spandrel's
reading of it: the feature width, growth channels, block count and scale come from the tensors, the
pixel-unshuffle of Real-ESRGAN's x2 / x1 files from the first convolution's input channels (a side that is
not a multiple of it is reflect-padded and the output cropped, as spandrel does). The classic ESRGAN layout
(`model.0`, `model.1.sub.N.RDB1...`) and BasicSR's older names (`RRDB_trunk`, `trunk_conv`, `upconv1`,
`HRconv`) are renamed to these. tests/test_rrdbnet.py checks the output against spandrel's.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import nn


class ResidualDenseBlock(nn.Module):
    def __init__(self, num_feat: int, num_grow_ch: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(num_feat, num_grow_ch, 3, 1, 1)
        self.conv2 = nn.Conv2d(num_feat + num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv3 = nn.Conv2d(num_feat + 2 * num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv4 = nn.Conv2d(num_feat + 3 * num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv5 = nn.Conv2d(num_feat + 4 * num_grow_ch, num_feat, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = F.leaky_relu(self.conv1(x), 0.2)
        x2 = F.leaky_relu(self.conv2(torch.cat((x, x1), 1)), 0.2)
        x3 = F.leaky_relu(self.conv3(torch.cat((x, x1, x2), 1)), 0.2)
        x4 = F.leaky_relu(self.conv4(torch.cat((x, x1, x2, x3), 1)), 0.2)
        x5 = self.conv5(torch.cat((x, x1, x2, x3, x4), 1))
        return x5 * 0.2 + x  # the residual scaling of ESRGAN's paper


class RRDB(nn.Module):
    def __init__(self, num_feat: int, num_grow_ch: int) -> None:
        super().__init__()
        self.rdb1 = ResidualDenseBlock(num_feat, num_grow_ch)
        self.rdb2 = ResidualDenseBlock(num_feat, num_grow_ch)
        self.rdb3 = ResidualDenseBlock(num_feat, num_grow_ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rdb3(self.rdb2(self.rdb1(x))) * 0.2 + x


class RRDBNet(nn.Module):
    """Pictures (B, C, H, W) in [0, 1] -> (B, C, H * scale, W * scale); `scale` = 2 ** ups / unshuffle."""

    def __init__(
        self,
        *,
        in_channels: int = 3,
        out_channels: int = 3,
        num_feat: int = 64,
        num_block: int = 23,
        num_grow_ch: int = 32,
        num_up: int = 2,
        unshuffle: int = 1,
    ) -> None:
        super().__init__()
        self.unshuffle = unshuffle
        self.scale = 2**num_up // unshuffle
        self.conv_first = nn.Conv2d(in_channels * unshuffle * unshuffle, num_feat, 3, 1, 1)
        self.body = nn.Sequential(*(RRDB(num_feat, num_grow_ch) for _ in range(num_block)))
        self.conv_body = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_ups = nn.ModuleList(nn.Conv2d(num_feat, num_feat, 3, 1, 1) for _ in range(num_up))
        self.conv_hr = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_last = nn.Conv2d(num_feat, out_channels, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        if self.unshuffle > 1:
            pad_h, pad_w = -height % self.unshuffle, -width % self.unshuffle
            if pad_h or pad_w:
                x = F.pad(x, (0, pad_w, 0, pad_h), mode="reflect")
            x = F.pixel_unshuffle(x, self.unshuffle)
        feat = self.conv_first(x)
        feat = feat + self.conv_body(self.body(feat))
        for conv in self.conv_ups:
            feat = F.leaky_relu(conv(F.interpolate(feat, scale_factor=2, mode="nearest")), 0.2)
        out = self.conv_last(F.leaky_relu(self.conv_hr(feat), 0.2))
        return out[:, :, : height * self.scale, : width * self.scale]


# Older names -> BasicSR's current ones (regex, replacement), tried in order.
_RENAMES = (
    (r"^RRDB_trunk\.(\d+)\.RDB(\d)\.", r"body.\1.rdb\2."),
    (r"^trunk_conv\.", "conv_body."),
    (r"^upconv(\d)\.", r"conv_up\1."),
    (r"^HRconv\.", "conv_hr."),
)


def _from_classic(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ESRGAN's original `model.N` sequential layout: 0 first conv, 1 the trunk (`sub.N` blocks, `sub.NB` the
    trunk conv), then per 2x an (upsample, conv, lrelu) triple at 2+3k, then the HR conv and the last conv."""
    ups = sorted({int(m.group(1)) for k in state if (m := re.match(r"model\.(\d+)\.weight$", k))} - {0})
    trunk = [k for k in ups if k > 1]
    *up_convs, hr, last = trunk
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if m := re.match(r"model\.1\.sub\.(\d+)\.RDB(\d)\.conv(\d)\.0\.(weight|bias)$", key):
            out[f"body.{m[1]}.rdb{m[2]}.conv{m[3]}.{m[4]}"] = value
        elif m := re.match(r"model\.1\.sub\.(\d+)\.(weight|bias)$", key):
            out[f"conv_body.{m[2]}"] = value
        elif m := re.match(r"model\.(\d+)\.(weight|bias)$", key):
            index = int(m[1])
            name = {0: "conv_first", hr: "conv_hr", last: "conv_last"}.get(index)
            if name is None and index in up_convs:
                name = f"conv_up{up_convs.index(index) + 1}"
            if name is not None:
                out[f"{name}.{m[2]}"] = value
    return out


def _canonical(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    state = {k.removeprefix("module."): v for k, v in state.items()}
    if "model.0.weight" in state:
        return _from_classic(state)
    out = {}
    for key, value in state.items():
        for pattern, replacement in _RENAMES:
            key = re.sub(pattern, replacement, key)
        out[key] = value
    return out


def is_rrdbnet(keys: set[str]) -> bool:
    """Whether tensor names are an RRDBNet's in one of the layouts this module reads."""
    keys = {k.removeprefix("module.") for k in keys}
    return (
        ("conv_first.weight" in keys and "conv_last.weight" in keys)
        or any(k.startswith("model.1.sub.0.RDB1.") for k in keys)
        or any(k.startswith("RRDB_trunk.0.RDB1.") for k in keys)
    )


def rrdbnet_from_state_dict(state: dict[str, torch.Tensor]) -> RRDBNet:
    """The module with its hyper-parameters read from the tensors, weights loaded (strict), in eval mode."""
    state = _canonical(state)
    first, last = state["conv_first.weight"], state["conv_last.weight"]
    num_feat, in_channels = first.shape[0], first.shape[1]
    out_channels = last.shape[0]
    unshuffle = 1
    for factor in (2, 4):  # Real-ESRGAN x2 / x1: the picture pixel-unshuffled into 4 / 16 channel groups
        if in_channels == out_channels * factor * factor:
            unshuffle = factor
    num_block = 1 + max(int(m[1]) for k in state if (m := re.match(r"body\.(\d+)\.", k)))
    num_up = sum(1 for k in state if re.match(r"conv_up\d+\.weight$", k))
    model = RRDBNet(
        in_channels=in_channels // (unshuffle * unshuffle),
        out_channels=out_channels,
        num_feat=num_feat,
        num_block=num_block,
        num_grow_ch=state["body.0.rdb1.conv1.weight"].shape[0],
        num_up=num_up,
        unshuffle=unshuffle,
    )
    ups = {f"conv_up{i + 1}.": f"conv_ups.{i}." for i in range(num_up)}
    renamed = {}
    for key, value in state.items():
        for old, new in ups.items():
            if key.startswith(old):
                key = new + key[len(old) :]
        renamed[key] = value
    model.load_state_dict(renamed, strict=True)
    return model.eval()


def rrdbnet_dims(shapes: dict[str, tuple[int, ...]]) -> tuple[int, int] | None:
    """(feature width, scale) from tensor names and shapes (a safetensors header), or None if not RRDBNet:
    what the working-memory formula needs before the weights are read."""
    if not is_rrdbnet(set(shapes)):
        return None
    shapes = {k.removeprefix("module."): v for k, v in shapes.items()}
    if "model.0.weight" in shapes:
        first, indices = (
            shapes["model.0.weight"],
            {int(m[1]) for k in shapes if (m := re.match(r"model\.(\d+)\.weight$", k))},
        )
        num_up = max(0, (len([i for i in indices if i > 1]) - 2))
        last = shapes[f"model.{max(indices)}.weight"]
    else:
        first = shapes.get("conv_first.weight")
        last = shapes.get("conv_last.weight")
        if first is None or last is None:  # BasicSR's older names: leave it to the reader
            return None
        num_up = sum(1 for k in shapes if re.match(r"(conv_up|upconv)\d+\.weight$", k))
    unshuffle = next((f for f in (2, 4) if first[1] == last[0] * f * f), 1)
    return first[0], 2**num_up // unshuffle
