"""The `# Copied from diffusers.<module>.<name>` (or `transformers.<module>.<name>`) markers (STYLE.md,
pipelines 5): each sits directly above the function or class it names, and that copy still matches the
installed library's original.

"Matches" compares the two syntax trees with docstrings and type annotations left out (ours are annotated,
diffusers' often are not); everything that runs must be the same. Code that follows a library loosely says
"Adapted from" instead and is not checked here. The originals are read from the libraries' source files, not
imported, so this stays in the fast lane.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^# Copied from ((?:diffusers|transformers)(?:\.\w+)+)$")
Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _markers() -> list[tuple[Path, int, str]]:
    found = []
    for path in sorted((REPO / "pipelines").rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = MARKER.match(line.strip())
            if match:
                found.append((path, number, match[1]))
    return found


def _without_docs_and_annotations(node: Definition) -> str:
    node = ast.parse(ast.unparse(node)).body[0]  # a copy
    for inner in ast.walk(node):
        if isinstance(inner, ast.arg):
            inner.annotation = None
        elif isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
            inner.returns = None
        if isinstance(inner, Definition):
            body = inner.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                inner.body = body[1:] or [ast.Pass()]
    return ast.dump(node, include_attributes=False)


def _definition(tree: ast.Module, name: str) -> Definition | None:
    return next((n for n in tree.body if isinstance(n, Definition) and n.name == name), None)


def _library_source(module: str) -> Path:
    """The file of `module` (`diffusers.x.y`, `transformers.x.y`), found without importing the library."""
    root = Path(importlib.util.find_spec(module.split(".")[0]).origin).parent
    return root.joinpath(*module.split(".")[1:]).with_suffix(".py")


def test_every_copied_from_marker_names_the_definition_under_it_and_matches_the_library() -> None:
    markers = _markers()
    assert markers, "no `# Copied from diffusers.` marker found: the pattern no longer matches the code"
    assert any(target.startswith("transformers.") for *_, target in markers), "no transformers marker seen"
    for path, number, target in markers:
        where = f"{path.relative_to(REPO)}:{number}"
        module, _, name = target.rpartition(".")
        ours = _definition(ast.parse(path.read_text(encoding="utf-8")), name)
        assert ours is not None, f"{where}: no top-level `{name}` in this file"
        assert ours.lineno == number + 1 or (
            ours.decorator_list and ours.decorator_list[0].lineno == number + 1
        ), f"{where}: the marker for `{name}` is not directly above it (it is at line {ours.lineno})"
        source = _library_source(module)
        assert source.is_file(), f"{where}: no module {module} in the installed library"
        original = _definition(ast.parse(source.read_text(encoding="utf-8")), name)
        assert original is not None, f"{where}: {module} has no `{name}`"
        assert _without_docs_and_annotations(ours) == _without_docs_and_annotations(original), (
            f"{where}: `{name}` differs from {target}; copy it again, or say `Adapted from` if it differs on purpose"
        )


def test_the_check_sees_a_changed_copy() -> None:
    copy = ast.parse("def f(a: int, b: int = 2) -> int:\n    '''doc'''\n    c = a + b\n    return c\n").body[
        0
    ]
    same = ast.parse("def f(a, b=2):\n    c = a + b\n    return c\n").body[0]
    changed = ast.parse("def f(a, b=2):\n    c = a - b\n    return c\n").body[0]
    assert _without_docs_and_annotations(copy) == _without_docs_and_annotations(same)
    assert _without_docs_and_annotations(copy) != _without_docs_and_annotations(changed)
