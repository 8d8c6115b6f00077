"""The import graph of app/, nodes/, pipelines/ and memory/: no cycle anywhere, and imports point one way.

What counts as an edge: every `import` and `from ... import` that can run, wherever it sits (module level,
inside a function or method, in a class body, in a try block), read with `ast` from the source, so an
import moved into a function to hide a cycle is still seen. `from pkg import name` counts as importing
`pkg.name` when that is a module, else `pkg`; when `pkg/__init__.py` resolves `name` lazily (PEP 562, as
memory/ does) it also counts as importing the module that `__init__` names it from. Importing `a.b.c` runs
`a/__init__.py` and `a/b/__init__.py` too, so those are edges as well, except from a module inside that
package (Python has already started the package by then).

Not counted: imports under `if TYPE_CHECKING:`. They never run, and with `from __future__ import annotations`
a type hint is text: app/gui's mixins annotate `self: MainWindow` and scene items name each other that way,
which creates no import. They do count for the layer rule: a type from a higher layer is still a dependency
the wrong way. Also not seen: modules imported by a computed name (`importlib.import_module(variable)`,
entry points).

The layer rule (STYLE.md): `app -> nodes -> pipelines -> memory`; a package imports only itself and the
packages below it, and only app/ imports Qt.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("app", "nodes", "pipelines", "memory")  # top to bottom
QT = ("PySide6", "shiboken6", "pyqtgraph", "PyQt5", "PyQt6", "qtpy")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the module named (possibly outside the packages: "torch", "PySide6.QtCore")
    line: int
    in_function: bool
    type_checking: bool


def _module_name(root: Path, path: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _raw_imports(name: str, path: Path) -> list[tuple[str, str | None, int, bool, bool]]:
    """(module, imported name or None, line, in a function, under TYPE_CHECKING) for every import in the file."""
    is_package = path.name == "__init__.py"
    found: list[tuple[str, str | None, int, bool, bool]] = []

    def visit(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit_one(stmt, in_function, True)
                for stmt in child.orelse:
                    visit_one(stmt, in_function, type_checking)
            else:
                visit_one(child, in_function, type_checking)

    def visit_one(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((a.name, None, node.lineno, in_function, type_checking) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            found.extend((base, a.name, node.lineno, in_function, type_checking) for a in node.names)
        else:
            visit(
                node, in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef), type_checking
            )

    visit(ast.parse(path.read_text(encoding="utf-8")), False, False)
    return found


def import_graph(root: Path, packages: tuple[str, ...]) -> tuple[set[str], list[Import]]:
    """The modules under `root/<package>` and every import they make (see the module docstring)."""
    files = {_module_name(root, p): p for package in packages for p in sorted((root / package).rglob("*.py"))}
    raw = {name: _raw_imports(name, path) for name, path in files.items()}
    # A package __init__'s own imports by name: what `from package import name` resolves to (PEP 562 included).
    provides = {
        name: {alias: module for module, alias, *_ in raw[name] if alias is not None and module in files}
        for name, path in files.items()
        if path.name == "__init__.py"
    }
    edges: list[Import] = []
    for source, imports in raw.items():
        for module, alias, line, in_function, type_checking in imports:
            targets = [module]
            if alias is not None and f"{module}.{alias}" in files:
                targets = [f"{module}.{alias}"]
            elif alias is not None and alias in provides.get(module, {}):
                targets.append(provides[module][alias])
            for target in targets:
                parts = target.split(".")
                for i in range(1, len(parts) + 1):  # `a.b.c` runs a/__init__ and a/b/__init__ too
                    step = ".".join(parts[:i])
                    inside = source == step or source.startswith(step + ".")
                    if (step in files and not inside) or (i == len(parts) and step not in files):
                        edges.append(Import(source, step, line, in_function, type_checking))
    return set(files), edges


def find_cycle(modules: set[str], edges: list[Import]) -> list[Import] | None:
    """One import cycle as its edges (first to last, back to the start), or None; iterative DFS."""
    out: dict[str, list[Import]] = {m: [] for m in modules}
    for edge in edges:
        if edge.target in modules and not edge.type_checking:
            out[edge.source].append(edge)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(modules):
        if start in state:
            continue
        path: list[Import] = []
        stack = [(start, iter(out[start]))]
        state[start] = 1
        while stack:
            node, pending = stack[-1]
            edge = next(pending, None)
            if edge is None:
                state[node] = 2
                stack.pop()
                if path:
                    path.pop()
                continue
            if state.get(edge.target) == 1:
                first = next((i for i, e in enumerate(path) if e.source == edge.target), len(path))
                return [*path[first:], edge]
            if edge.target not in state:
                state[edge.target] = 1
                path.append(edge)
                stack.append((edge.target, iter(out[edge.target])))
    return None


def describe(cycle: list[Import]) -> str:
    steps = [
        f"{e.source} ({e.source.replace('.', '/')}.py line {e.line}{', in a function' if e.in_function else ''})"
        for e in cycle
    ]
    return "import cycle: " + " -> ".join([*steps, cycle[0].source])


@pytest.fixture(scope="module")
def repo_graph() -> tuple[set[str], list[Import]]:
    """The packages' import graph, read once for both checks below (parsing ~350 files is most of each)."""
    return import_graph(REPO, LAYERS)


def test_no_import_cycle_in_app_nodes_pipelines_or_memory(repo_graph) -> None:
    modules, edges = repo_graph
    assert "pipelines.diffusion.denoising" in modules and len(edges) > 500  # the whole tree was read
    cycle = find_cycle(modules, edges)
    assert cycle is None, describe(cycle)


@pytest.mark.slow  # over 5 s in the fast lane on a loaded 2-core machine
def test_imports_point_down_the_layers_and_only_app_imports_qt(repo_graph) -> None:
    modules, edges = repo_graph
    wrong = []
    for e in edges:
        source_layer = LAYERS.index(e.source.split(".")[0])
        top = e.target.split(".")[0]
        kind = " (type hint)" if e.type_checking else ""
        if top in LAYERS and LAYERS.index(top) < source_layer:
            wrong.append(f"{e.source} line {e.line} imports {e.target}{kind}: {top}/ is above it")
        if top in QT and source_layer > 0:
            wrong.append(f"{e.source} line {e.line} imports {e.target}{kind}: only app/ imports Qt")
    assert not wrong, "\n".join(wrong)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_sees_a_cycle_behind_a_function_level_import(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import helper\n",
            "pkg/b.py": "def helper():\n    from pkg import a\n    return a\n",
            "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import x\n",
        },
    )
    modules, edges = import_graph(tmp_path, ("pkg",))
    cycle = find_cycle(modules, edges)
    assert cycle is not None and {e.source for e in cycle} == {"pkg.a", "pkg.b"}
    assert "pkg/b.py line 2, in a function" in describe(cycle)
    # The TYPE_CHECKING import is seen (for the layer rule) but is not an edge of any cycle.
    assert [e.type_checking for e in edges if e.source == "pkg.c" and e.target == "pkg.a"] == [True]


def test_the_check_follows_lazy_package_exports_and_relative_imports(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.low import Thing\n",
            "pkg/low.py": "def f():\n    from . import high\n",
            "pkg/high.py": "from pkg import Thing\n",
        },
    )
    modules, edges = import_graph(tmp_path, ("pkg",))
    cycle = find_cycle(modules, edges)
    assert cycle is not None and {e.source for e in cycle} == {"pkg.low", "pkg.high"}
