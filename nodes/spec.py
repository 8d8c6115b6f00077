"""The runtime description of a node type: ports, parameters and one `run` function.

Lives here: `Param`, `Input`, `Output`, `NodeSpec`. Imports only `nodes.types` and `nodes.kinds` (what each
kind of parameter accepts lives there).

The registry, the executor and the editor read a `NodeSpec`. Nodeloom's node types are written as one typed
class each (nodes/declare.py, which derives the spec from the class's fields); a spec can still be written
by hand, as older node packs do, with `run(ctx, **values)` receiving every connected input and every
parameter by name and returning a dict of outputs by name:

    CONCAT = NodeSpec(
        type="Concatenate", title="Concatenate", category="text",
        inputs=[Input("a", TEXT), Input("b", TEXT)],
        params=[Param("separator", "string", default=" ")],
        outputs=[Output("text", TEXT)],
        run=lambda ctx, a, b, separator: {"text": a + separator + b},
    )
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodes.kinds import ParamKind, kind_named
from nodes.types import PortType


@dataclass(frozen=True)
class Param:
    """A value set on the node itself (a widget in the editor), not fed by a wire.

    `kind` is a `nodes.kinds.ParamKind` (its name, "int", is accepted too and looked up): the kind checks,
    parses, shows and picks the widget; the fields below are this parameter's facts that the kind reads.
    """

    name: str
    kind: ParamKind
    default: Any = None
    help: str = ""
    min: float | None = None
    max: float | None = None
    step: float | None = None
    choices: tuple[Any, ...] = ()
    # For kind path: a file-dialog filter such as "Models (*.safetensors *.gguf)"; "dir" picks folders.
    file_filter: str = ""
    optional: bool = False  # None is allowed
    # An extra check run at validation, before anything computes (e.g. a save prefix): the reason or None.
    validate: Callable[[Any], str | None] | None = None
    # 0 means "the connected model's native size" (Empty Latent's width/height): the editor says so.
    zero_is_native_size: bool = False
    # The ComfyUI widget that carries this value one to one (import and export read it); "" when none does
    # or a converter in nodes/comfy translates it.
    comfy: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", kind_named(self.kind))
        object.__setattr__(self, "choices", tuple(self.choices))

    def check(self, value: Any) -> str | None:
        """Why `value` is not acceptable for this parameter, or None when it is."""
        if value is None:
            return None if self.optional else "a value is required"
        reason = self.kind.check(self, value)
        if reason is None and self.validate is not None:
            return self.validate(value)
        return reason

    def parse(self, raw: str | float) -> Any:
        """Command-line text (`--set`, `--sweep`) -> a value of this parameter's kind (unchecked)."""
        return self.kind.parse(self, raw)

    def show(self, value: Any) -> str:
        """The value as painted on the node."""
        return self.kind.show(self, value)


@dataclass(frozen=True)
class Input:
    """A port fed by a wire from another node's output."""

    name: str
    type: PortType
    help: str = ""
    optional: bool = False


@dataclass(frozen=True)
class Output:
    name: str
    type: PortType
    help: str = ""
    # The inputs and params this output depends on (None: all of them). Lets the executor keep nodes
    # downstream of one output cached when only another output's param changed (LoadLoRA's strengths).
    depends_on: tuple[str, ...] | None = None
    # The input whose value this output passes on unchanged (a Reroute): a wire from it carries the type of
    # whatever is wired into that input, so typed-wire checks see through it (`nodes.reroute.link_type`).
    passes: str | None = None


@dataclass(frozen=True)
class NodeSpec:
    """Everything the registry, the editor and the executor need to know about a node type."""

    type: str  # stable identifier saved in workflow files, e.g. "SaveImage"
    title: str
    category: str
    run: Callable[..., dict[str, Any]]
    inputs: tuple[Input, ...] | list[Input] = ()
    outputs: tuple[Output, ...] | list[Output] = ()
    params: tuple[Param, ...] | list[Param] = ()
    description: str = ""
    version: int = 1  # bump when saved params change meaning; workflow files record it
    # A sink writes something the user asked for (a file, a preview): the executor runs the graph
    # for its sinks when no outputs are named.
    is_output: bool = False
    tags: tuple[str, ...] = field(default=())
    # Modules a run of this node imports that the nodes before it may not have (an output node's writer
    # library): a memory plan, which does not run output nodes, imports them before it measures the process
    # baseline, so the RSS they add is in the prediction.
    imports: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        # Frozen dataclass: normalise lists to tuples so specs are hashable and immutable.
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "params", tuple(self.params))
        names = [p.name for p in self.inputs] + [p.name for p in self.params]
        if len(names) != len(set(names)):
            raise ValueError(f"node type {self.type!r}: input and parameter names must be unique: {names}")

    def input(self, name: str) -> Input | None:
        return next((p for p in self.inputs if p.name == name), None)

    def output(self, name: str) -> Output | None:
        return next((p for p in self.outputs if p.name == name), None)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def default_params(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}
