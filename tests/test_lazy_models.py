"""diffusers' model packages imported one model file at a time (`pipelines.diffusion.lazy_models`, issue 29's
start-up): a package's submodule imports alone, a re-exported name imports its one file on first access, and
diffusers' own model packages are of the shape the finder reads (else it would silently import them whole)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

from pipelines.diffusion.lazy_models import LAZY_PACKAGES, _LazyPackageFinder, package_exports


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


@pytest.fixture
def fake_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """A package `lazyfake.models` whose __init__ re-exports two model files, each noting its import."""
    pkg = tmp_path / "lazyfake" / "models"
    pkg.mkdir(parents=True)
    (tmp_path / "lazyfake" / "__init__.py").write_text("IMPORTED = []\n")
    (pkg / "__init__.py").write_text("from .unet_a import UNetA\nfrom .unet_b import UNetB\n")
    for name in ("a", "b"):
        (pkg / f"unet_{name}.py").write_text(
            f"import lazyfake\nlazyfake.IMPORTED.append({name!r})\nclass UNet{name.upper()}: pass\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = _LazyPackageFinder(("lazyfake.models",))
    sys.meta_path.insert(0, finder)
    yield importlib.import_module("lazyfake")
    sys.meta_path.remove(finder)
    for name in [m for m in sys.modules if m.split(".")[0] == "lazyfake"]:
        del sys.modules[name]


def test_a_model_file_imports_without_its_package_siblings(fake_models) -> None:  # noqa: ANN001
    from lazyfake.models.unet_a import UNetA

    assert fake_models.IMPORTED == ["a"] and UNetA.__name__ == "UNetA"
    models = importlib.import_module("lazyfake.models")
    assert models.UNetB.__name__ == "UNetB"  # a re-exported name: its one file, on first access
    assert fake_models.IMPORTED == ["a", "b"]
    with pytest.raises(AttributeError):
        _ = models.UNetC


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_diffusers_model_packages_are_plain_re_exports(package: str) -> None:
    # Read, not imported: the file the finder would read. A diffusers release that adds code to one of these
    # __init__ files makes the finder import it whole (slower, still right); this says so.
    top = importlib.util.find_spec("diffusers")  # a top-level spec is found without importing diffusers
    assert top is not None and top.origin is not None
    init = Path(top.origin).parent.joinpath(*package.split(".")[1:], "__init__.py")
    exports = package_exports(init)
    assert exports is not None and len(exports) > 5
