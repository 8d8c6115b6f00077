"""ComfyUI's run-time value nodes: a picture's size, and a small math expression over wired values.

Lives here: the node types `GetImageSize`, `MathExpression`, the pure function `evaluate_expression` and
`NODES`. Imports `nodes.declare`, `nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`.

ComfyMathExpression (ComfyUI 2026) computes one expression of `a`, `b`, ... and offers it as FLOAT, INT and
BOOL; the templates use it to round sizes to multiples (`a & -8`, `max(5, round(a * 24))`). The expression
comes from a file, so it is never given to `eval`: it is parsed with `ast` and only numbers, the names a-d,
arithmetic, bitwise and comparison operators, `x if c else y` and a few functions (min, max, round, abs,
floor, ceil, sqrt, int, float) are evaluated; anything else is refused naming what.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import STRING
from nodes.spec import NodeSpec, Output
from nodes.types import ANY, BOOL, FLOAT, IMAGE, INT

if TYPE_CHECKING:
    import torch

MAX_EXPRESSION = 500  # characters: the templates' longest is about 80
_NAMES = ("a", "b", "c", "d")
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "round": round,
    "abs": abs,
    "floor": math.floor,
    "ceil": math.ceil,
    "sqrt": math.sqrt,
    "int": int,
    "float": float,
}


def _eval(node: ast.AST, values: dict[str, Any]) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body, values)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | bool):
        return node.value
    if isinstance(node, ast.Name) and node.id in values:
        return values[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left, values), _eval(node.right, values)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("an exponent above 64")  # a file must not make us compute 9**9**9
        if isinstance(node.op, ast.LShift) and right > 64:
            raise ValueError("a shift above 64 bits")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand, values))
    if isinstance(node, ast.BoolOp):
        items = [_eval(v, values) for v in node.values]
        return all(items) if isinstance(node.op, ast.And) else any(items)
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        left = _eval(node.left, values)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, values) else node.orelse, values)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _FUNCTIONS[node.func.id](*(_eval(arg, values) for arg in node.args))
    raise ValueError(
        f"{type(node).__name__} is not allowed (numbers, a-d, operators, {', '.join(_FUNCTIONS)})"
    )


def evaluate_expression(expression: str, values: dict[str, Any]) -> float | int | bool:
    """The value of `expression` over `values` (names a-d); ValueError naming what is not allowed."""
    if len(expression) > MAX_EXPRESSION:
        raise ValueError(f"the expression has {len(expression)} characters, more than {MAX_EXPRESSION}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an expression: {exc.msg}") from None
    result = _eval(tree, values)
    if not isinstance(result, int | float | bool):
        raise ValueError(f"the expression gives {type(result).__name__}, not a number")
    return result


@node_type(
    "GetImageSize",
    title="Image Size",
    category="image",
    outputs=[Output("width", INT), Output("height", INT), Output("batch_size", INT)],
    description="A picture's width, height and batch size (ComfyUI's GetImageSize).",
    tags=("GetImageSize", "size", "width", "height"),
)
class GetImageSize(Node):
    image: torch.Tensor = wire(IMAGE)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        batch, height, width = self.image.shape[:3]  # (B, H, W, C)
        return {"width": int(width), "height": int(height), "batch_size": int(batch)}


@node_type(
    "MathExpression",
    title="Math Expression",
    category="primitives",
    outputs=[Output("float", FLOAT), Output("int", INT), Output("bool", BOOL)],
    description="One expression of a-d (+ - * / // % ** & | ^ << >>, comparisons, min, max, round, ...).",
    tags=("ComfyMathExpression", "math", "expression"),
)
class MathExpression(Node):
    expression: str = param(STRING, "a", comfy="expression")
    a: Any = wire(ANY, optional=True)
    b: Any = wire(ANY, optional=True)
    c: Any = wire(ANY, optional=True)
    d: Any = wire(ANY, optional=True)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        values = {name: value for name in _NAMES if (value := getattr(self, name)) is not None}
        try:
            result = evaluate_expression(self.expression, values)
        except (ValueError, TypeError, ZeroDivisionError, OverflowError) as exc:
            raise ValueError(f"expression {self.expression!r}: {exc}") from None
        # ComfyUI's outputs: the value as a float, as an int (truncated toward zero), and its truth.
        return {"float": float(result), "int": int(result), "bool": bool(result)}


NODES: tuple[NodeSpec, ...] = (GetImageSize.spec, MathExpression.spec)
