"""diffusers' model packages imported one model file at a time (`pipelines.diffusion.lazy_models`, issue 29's
start-up): an SD model's classes without every other model, and every re-exported name still there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.diffusion.lazy_models import package_exports

REPO = Path(__file__).resolve().parent.parent


def test_exports_are_read_from_a_plain_init_and_refused_otherwise(tmp_path: Path) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text(
        '"""doc"""\nfrom ...utils import is_torch_available\n\nif is_torch_available():\n'
        "    from .unet_a import A, B as C\n    from .unet_d import D\n"
    )
    assert package_exports(plain) == {"A": "unet_a", "C": "unet_a", "D": "unet_d"}
    busy = tmp_path / "busy.py"
    busy.write_text("from .unet_a import A\nREGISTRY = {}\n")  # does more than re-export: run as it is
    assert package_exports(busy) is None
    star = tmp_path / "star.py"
    star.write_text("from .unet_a import *\n")
    assert package_exports(star) is None


@pytest.mark.slow  # a fresh interpreter importing torch and diffusers: ~5-10 s
def test_an_sd_unet_and_vae_import_without_the_other_models() -> None:
    code = (
        "import sys\n"
        "from pipelines.diffusion.lazy_models import install\n"
        "install()\n"
        "from diffusers import UNet2DConditionModel, AutoencoderKL\n"
        "others = [m for m in ('diffusers.models.transformers.ace_step_transformer',"
        " 'diffusers.models.autoencoders.autoencoder_kl_wan', 'diffusers.models.unets.unet_stable_cascade')"
        " if m in sys.modules]\n"
        "from diffusers.models.autoencoders import AutoencoderKLWan\n"
        "import diffusers.models.unets as unets\n"
        "print(others, UNet2DConditionModel.__module__, AutoencoderKLWan.__name__, unets.UNet2DModel.__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [
        "[]",
        "diffusers.models.unets.unet_2d_condition",
        "AutoencoderKLWan",
        "UNet2DModel",
    ]
