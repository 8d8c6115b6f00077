"""The tiny Wan 2.2 TI2V demo model (`demo:tiny-wan22-ti2v`): random weights, fixed seeds, built offline.

Lives here: `build_tiny_wan22_ti2v`, `TINY_WAN22_VAE`. May import: stdlib, torch, diffusers,
pipelines.diffusion.demo_wan.

Shaped like diffusers' own Wan 2.2 TI2V-5B test components (tests/pipelines/wan/test_wan_22.py): one
transformer over 48 latent channels, the Wan 2.2 VAE (`is_residual`, pixels folded 2x2 into 12 channels
before the encoder: `patch_size` 2, 48 latent channels) and `expand_timesteps` in model_index.json (a timestep
per video token, so an image can condition the first latent frame at timestep 0). The real VAE is 16x in space
and 4x in time; this one is 8x (2 for the pixel folding x 2 x 2) and 2x, which its config says, so nothing may
assume the real factors. Per-channel latent means and deviations are not 0 and 1, so their order of operations
is checked. Text encoder, tokenizer and scheduler are `demo:tiny-wan`'s. The folder is a `WanPipeline`, as
the released TI2V-5B diffusers folder is; `WanImageToVideoPipeline` loads the same folder for image-to-video.
"""

from __future__ import annotations

import torch
from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel

from pipelines.diffusion.demo_wan import TINY_WAN, _parts

_Z = 48
TINY_WAN22_VAE = dict(
    base_dim=4,
    z_dim=_Z,
    in_channels=12,  # 3 colours x the 2x2 pixel folding
    out_channels=12,
    is_residual=True,
    patch_size=2,
    dim_mult=[1, 1, 1],
    num_res_blocks=1,
    temperal_downsample=[False, True],
    scale_factor_spatial=8,
    scale_factor_temporal=2,
    latents_mean=[round((i % 7 - 3) * 0.1, 2) for i in range(_Z)],
    latents_std=[round(1.0 + (i % 5) * 0.1, 2) for i in range(_Z)],
)
TINY_WAN22_TI2V = dict(TINY_WAN, in_channels=_Z, out_channels=_Z)


def build_tiny_wan22_ti2v() -> WanPipeline:
    parts = _parts()
    torch.manual_seed(0)
    vae = AutoencoderKLWan(**TINY_WAN22_VAE)
    torch.manual_seed(0)
    transformer = WanTransformer3DModel(**TINY_WAN22_TI2V)
    return WanPipeline(**{**parts, "vae": vae, "transformer": transformer}, expand_timesteps=True)
