"""Parameter kinds as objects: the one owner of what a kind of parameter accepts and how it is typed in.

Lives here: `ParamKind` and its subclasses, the built-in kinds (`INT`, `SEED`, `FLOAT`, `BOOL`, `STRING`,
`TEXT`, `PATH`, `CHOICE`), `KINDS` (by name, for `Param("x", "int")`), `kind_named`. Imports only
`nodes.types` and `nodes.problems` (for `quote`). No Qt: a kind names its editor widget (`widget`) and
app/gui/inspector.py maps that name to a builder.

A kind owns, for every parameter declared with it:
- `check(param, value)`: why a value is refused (workflow files, wired values, `--set`, `--sweep`);
- `parse(param, raw)`: command-line text, or a sweep range's number, to the parameter's type (`--set` and
  `--sweep` share it); a value that does not parse is returned unchanged, so `check` names it;
- `show(param, value)`: the short text painted on the node;
- `port_type`: the wire type the parameter accepts when fed by a link;
- `widget`: the editor widget's name.
A parameter's ComfyUI widget name is its own fact (`Param.comfy`), not its kind's.

A node pack adds a kind by subclassing `ParamKind` and passing the instance as `Param(kind=...)`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodes import types as ports
from nodes.problems import quote
from nodes.types import PortType

if TYPE_CHECKING:
    from nodes.spec import Param

_SURROGATE = re.compile("[\ud800-\udfff]")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True, eq=False)
class ParamKind:
    """What a parameter holds. One instance per kind; it also equals its name, so `param.kind == "seed"`
    (as node packs and older code write it) keeps working."""

    name: str
    python_types: tuple[type, ...]
    port_type: PortType
    widget: str  # the editor widget app/gui/inspector.py builds (WIDGETS there, keyed by this name)

    def check(self, param: Param, value: Any) -> str | None:
        """Why a non-None `value` is not acceptable for `param`, or None when it is."""
        if not isinstance(value, self.python_types):
            return f"expected {self.name}, got {type(value).__name__} {quote(value)}"
        return None

    def parse(self, param: Param, raw: str | float) -> Any:
        """Command-line text (or a sweep range's number) -> this kind's value; unchanged when it does not fit."""
        return raw if isinstance(raw, str) else json.dumps(raw)

    def show(self, param: Param, value: Any) -> str:
        """The value as painted on the node."""
        return str(value)

    def __eq__(self, other: object) -> bool:
        return other == self.name if isinstance(other, str) else other is self

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"<param kind {self.name}>"


@dataclass(frozen=True, eq=False, repr=False)
class NumberKind(ParamKind):
    """int, seed and float: bounded by the param's min/max; a bool is never a number here."""

    integer: bool = False

    def check(self, param: Param, value: Any) -> str | None:
        # bool is an int in Python; refuse it where a number is meant.
        if isinstance(value, bool):
            return f"expected a number, got {value!r}"
        refused = super().check(param, value)
        if refused is not None:
            return refused
        if not self.integer and not _finite(value):
            return f"expected a finite number, got {quote(value)}"
        if param.min is not None and value < param.min:
            return f"{quote(value)} is below the minimum {param.min:g}"
        if param.max is not None and value > param.max:
            return f"{quote(value)} is above the maximum {param.max:g}"
        return None

    def parse(self, param: Param, raw: str | float) -> Any:
        if self.integer:
            # A range's float that is a whole number (`1..3` after a float step) is an int here.
            if isinstance(raw, float) and raw.is_integer():
                return int(raw)
            if isinstance(raw, str):
                try:
                    return int(raw)
                except ValueError:
                    return raw
            return raw
        try:
            return float(raw)
        except (TypeError, ValueError):
            return raw

    def show(self, param: Param, value: Any) -> str:
        if not self.integer and isinstance(value, (int, float)):
            return f"{value:g}"
        return str(value)


@dataclass(frozen=True, eq=False, repr=False)
class BoolKind(ParamKind):
    def parse(self, param: Param, raw: str | float) -> Any:
        if isinstance(raw, str):
            lowered = raw.lower()
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
        return raw

    def show(self, param: Param, value: Any) -> str:
        return "on" if value else "off"


@dataclass(frozen=True, eq=False, repr=False)
class TextKind(ParamKind):
    """string, text (multi-line prompts, shown quoted) and path (shown by its last part)."""

    def check(self, param: Param, value: Any) -> str | None:
        return super().check(param, value) or _unicode_problem(value)

    def show(self, param: Param, value: Any) -> str:
        text = str(value or "").replace("\n", " ")
        if self.name == "path" and "/" in text:
            text = "…/" + text.rsplit("/", 1)[-1]
        return f"“{text}”" if self.name == "text" else (text or "—")


@dataclass(frozen=True, eq=False, repr=False)
class ChoiceKind(ParamKind):
    def check(self, param: Param, value: Any) -> str | None:
        refused = super().check(param, value) or (_unicode_problem(value) if isinstance(value, str) else None)
        if refused is not None:
            return refused
        if value not in param.choices:
            listed = ", ".join(repr(c) for c in param.choices)
            return f"{quote(value)} is not one of {listed}"
        return None

    def parse(self, param: Param, raw: str | float) -> Any:
        # One of the choices as typed wins; else JSON, so `--set n.clip_skip=-2` gives the number -2
        # (the CLI's old rule); a sweep range's number that is no choice is kept as its text (the sweep's).
        if raw in param.choices:
            return raw
        if not isinstance(raw, str):
            return json.dumps(raw)
        if raw.isalpha():
            return raw
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw


def _finite(value: float) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int too large for a float
        return False


def _unicode_problem(value: str) -> str | None:
    hit = _SURROGATE.search(value)
    if hit:
        return f"not valid Unicode: a lone surrogate {hit.group()!r} at position {hit.start()}"
    return None


INT = NumberKind("int", (int,), ports.INT, widget="int", integer=True)
# A seed is an int the editor shows as a digits-only field with a Random button (and a control after runs).
SEED = NumberKind("seed", (int,), ports.INT, widget="seed", integer=True)
FLOAT = NumberKind("float", (int, float), ports.FLOAT, widget="float")
BOOL = BoolKind("bool", (bool,), ports.BOOL, widget="bool")
STRING = TextKind("string", (str,), ports.STRING, widget="line")
TEXT = TextKind("text", (str,), ports.STRING, widget="prompt")
PATH = TextKind("path", (str,), ports.STRING, widget="path")
CHOICE = ChoiceKind("choice", (str, int, float), ports.STRING, widget="choice")

KINDS: dict[str, ParamKind] = {k.name: k for k in (INT, SEED, FLOAT, BOOL, STRING, TEXT, PATH, CHOICE)}


def kind_named(kind: ParamKind | str) -> ParamKind:
    """A kind object from itself or its name (`Param("steps", "int")` as node packs write it)."""
    if isinstance(kind, ParamKind):
        return kind
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown parameter kind {kind!r}; one of {', '.join(KINDS)}") from None
