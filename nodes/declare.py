"""Node types as single typed declarations: the one owner of how a node type is written.

Lives here: `Node`, `node_type`, `shared_fields`, `param`, `wire`, `param_like`, `settings_from`. Imports
`nodes.spec` (the `NodeSpec` the registry, executor and editor read is derived here) and `nodes.kinds`.

A node type is one class. Its typed fields are its wired inputs (`wire`) and its parameters (`param`, with
the default, bounds, help and kind); `run(ctx)` reads them from the instance. `@node_type` makes the class
a frozen keyword-only dataclass and derives `cls.spec` from the fields, in the order they are declared:

    @node_type("Concatenate", title="Concatenate", category="text", outputs=[Output("text", TEXT)])
    class Concatenate(Node):
        a: str = wire(TEXT)
        b: str = wire(TEXT)
        separator: str = param(STRING, default=" ", help="put between a and b")

        def run(self, ctx: NodeContext) -> dict[str, Any]:
            return {"text": self.a + self.separator + self.b}

Adding a parameter is one edit: a field. The CLI (`--set`), sweeps, the inspector and the ComfyUI tables
(the field's `comfy=` widget name) all read it from `cls.spec`. A node type that is another plus what it
adds subclasses it (or a `@shared_fields` base); `param_like(Base, "cfg", default=8.0)` re-declares one
inherited field with a changed fact. The old form, `NodeSpec(..., run=function)`, still works (node packs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

from nodes.kinds import ParamKind
from nodes.spec import Input, NodeSpec, Output, Param
from nodes.types import PortType

_DECLARED = "nodeloom"  # the dataclass field metadata key holding a field's Param or Input
T = TypeVar("T")


class Node:
    """Base of a declared node type: `spec` is set by `@node_type`; `run` returns the outputs by name."""

    spec: ClassVar[NodeSpec]

    def run(self, ctx: Any) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__}.run")


def param(kind: ParamKind | str, default: Any = None, **facts: Any) -> Any:
    """A parameter field: `facts` are `Param`'s (help, min, max, step, choices, file_filter, optional,
    validate, zero_is_native_size, comfy; see nodes.spec.Param, where they are listed once). The field's
    name is the parameter's."""
    declared = Param("", kind, default, **facts)
    return dataclasses.field(default=default, metadata={_DECLARED: declared})


def wire(port: PortType, *, help: str = "", optional: bool = False) -> Any:
    """An input fed by a wire carrying `port`; an optional one left unconnected is None."""
    declared = Input("", port, help=help, optional=optional)
    if optional:
        return dataclasses.field(default=None, metadata={_DECLARED: declared})
    return dataclasses.field(metadata={_DECLARED: declared})


def param_like(base: type, name: str, **changes: Any) -> Any:
    """`base`'s declaration of field `name` with some facts changed, e.g. `param_like(Sampler, "cfg", default=8.0)`."""
    declared = _declaration(next(f for f in dataclasses.fields(base) if f.name == name))
    changed = dataclasses.replace(declared, **changes)
    if isinstance(changed, Input):
        return wire(changed.type, help=changed.help, optional=changed.optional)
    return dataclasses.field(default=changed.default, metadata={_DECLARED: changed})


def shared_fields(cls: type[T]) -> type[T]:
    """Fields several node types share (a base class), without making it a node type itself."""
    return dataclasses.dataclass(frozen=True, kw_only=True)(cls)


def node_type(
    name: str,
    *,
    title: str,
    category: str,
    outputs: Iterable[Output] = (),
    description: str = "",
    version: int = 1,
    is_output: bool = False,
    tags: tuple[str, ...] = (),
    imports: tuple[str, ...] = (),
) -> Callable[[type[T]], type[T]]:
    """Declare the class as the node type `name` (saved in workflow files); sets `cls.spec`."""

    def declare(cls: type[T]) -> type[T]:
        cls = shared_fields(cls)
        inputs: list[Input] = []
        params: list[Param] = []
        for f in dataclasses.fields(cls):
            declared = dataclasses.replace(_declaration(f), name=f.name)
            (inputs if isinstance(declared, Input) else params).append(declared)
        cls.spec = NodeSpec(  # type: ignore[attr-defined]
            type=name,
            title=title,
            category=category,
            run=_runner(cls),
            inputs=inputs,
            outputs=tuple(outputs),
            params=params,
            description=description,
            version=version,
            is_output=is_output,
            tags=tags,
            imports=imports,
        )
        return cls

    return declare


def settings_from(settings: Callable[..., T], node: object, **given: Any) -> T:
    """A settings dataclass (SamplerSettings, GenerationRequest) from the node's fields of the same names,
    plus `given` for the ones the node computes; the settings' own defaults fill the rest."""
    names = {f.name for f in dataclasses.fields(settings)}  # type: ignore[arg-type]
    ours = {f.name: getattr(node, f.name) for f in dataclasses.fields(node) if f.name in names}  # type: ignore[arg-type]
    return settings(**{**ours, **given})


def _declaration(f: dataclasses.Field) -> Param | Input:
    declared = f.metadata.get(_DECLARED)
    if not isinstance(declared, Param | Input):
        raise TypeError(f"field {f.name!r}: declare it with param(...) or wire(...)")
    return declared


def _runner(cls: type) -> Callable[..., dict[str, Any]]:
    """The `NodeSpec.run` the executor calls (`run(ctx, **values)`): build the node, then run it."""

    def run(ctx: Any, **values: Any) -> dict[str, Any]:
        return cls(**values).run(ctx)

    run.__qualname__ = f"{cls.__qualname__}.run"
    return run
