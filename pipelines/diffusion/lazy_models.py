"""diffusers' model packages imported one model file at a time (issue 29's start-up).

Lives here: `install`, `LAZY_PACKAGES`, `package_exports`. May import: stdlib only (diffusers is found, never
imported, here).

`diffusers` and `diffusers.models` are lazy modules, but the packages below them are not: importing
`diffusers.models.unets.unet_2d_condition` first runs `unets/__init__.py`, which imports every UNet, and
`unet_2d_blocks` reaches `transformers/__init__.py`, which imports every transformer model (ACE-Step's
among them); an SD run imported about 140 model modules it never used. `install()` puts a finder in front
of the import system for exactly those packages: the package module it makes has the real `__path__` (so
`diffusers.models.unets.unet_2d_condition` imports just that file and what it imports), and resolves a
re-exported name (`diffusers.models.unets.UNet2DModel`) by importing its one file on first access, as
diffusers' own lazy modules do. The names come from the package's `__init__.py`, read (not run) with `ast`;
an `__init__.py` that does anything besides re-export is imported as it is. Measured (CPU time for an SD
model's UNet + VAE classes after torch, 3 alternating runs on the shared 2-core machine): 5.2 s -> 4.7 s.

`install()` changes the interpreter's import system (`sys.meta_path`), so it is called once by the
process's entry point (`app.main`) and by `ClassRef.load` before a diffusers class is imported; calling it
again does nothing, and a package already imported the ordinary way stays as it is.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

LAZY_PACKAGES = (
    "diffusers.models.autoencoders",
    "diffusers.models.unets",
    "diffusers.models.transformers",
    "diffusers.models.controlnets",
)


def package_exports(init_file: Path) -> dict[str, str] | None:
    """name -> submodule for each `from .submodule import name` of a package's `__init__.py` (also inside
    `if is_torch_available():` blocks), or None when the file does anything else (run it as it is then)."""
    exports: dict[str, str] = {}

    def walk(statements: Sequence[ast.stmt]) -> bool:
        for node in statements:
            if isinstance(node, ast.ImportFrom):
                if any(a.name == "*" for a in node.names) or (node.level == 1 and not node.module):
                    return False  # a star import / `from . import x`: not a plain re-export
                if node.level == 1:
                    for alias in node.names:
                        exports.setdefault(alias.asname or alias.name, node.module or "")
            elif isinstance(node, ast.If):
                if not (walk(node.body) and walk(node.orelse)):
                    return False
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # a docstring
            else:
                return False
        return True

    try:
        tree = ast.parse(init_file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    return exports if walk(tree.body) and exports else None


class _LazyPackageLoader(importlib.abc.Loader):
    def __init__(self, exports: dict[str, str]) -> None:
        self.exports = exports

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        exports, name = self.exports, module.__name__

        def __getattr__(attr: str) -> object:
            submodule = exports.get(attr)
            if submodule is None:
                raise AttributeError(f"module {name!r} has no attribute {attr!r}")
            value = getattr(importlib.import_module(f"{name}.{submodule}"), attr)
            setattr(module, attr, value)  # found by the next lookup without coming here
            return value

        module.__getattr__ = __getattr__  # type: ignore[attr-defined]


class _LazyPackageFinder(importlib.abc.MetaPathFinder):
    def __init__(self, packages: Sequence[str] = LAZY_PACKAGES) -> None:
        self.packages = tuple(packages)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.packages:
            return None
        real = importlib.machinery.PathFinder.find_spec(fullname, path)
        if real is None or real.origin is None or not real.submodule_search_locations:
            return None
        exports = package_exports(Path(real.origin))
        if exports is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname,
            real.origin,
            loader=_LazyPackageLoader(exports),
            submodule_search_locations=list(real.submodule_search_locations),
        )


def install() -> None:
    """Put the finder in front of the import system (once per process)."""
    if not any(isinstance(finder, _LazyPackageFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _LazyPackageFinder())
