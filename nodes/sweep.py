"""Sweeps: `NODE.PARAM=SPEC` parsing, grid/zip job planning and ordering jobs by what they load.

Lives here: `SweepAxis`, `SweepJob`, `SweepError`, `parse_spec`, `parse_axis`, `plan_jobs`, `load_key`,
`order_jobs`, `pick_next`, `apply_job`. Imports `nodes.workflow`, `nodes.registry`, `nodes.types`. Pure: no
Qt, no torch, no files written; the runners live in app/batch.

A SPEC is a list (`1,2,3`), an inclusive range (`1..64`, `0.5..1.5:0.25`, `10..1:-3`) or `@file.txt` (one
value per line, blank lines skipped). Values are typed by the parameter they set, so `sampler.cfg=4,7` gives
floats and `positive.text=@prompts.txt` gives text.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodes.registry import NodeRegistry
from nodes.types import DENOISER, LLM, TEXT_ENCODER, VAE
from nodes.workflow import Workflow

# Outputs of these types are models: the nodes producing them (and the values they depend on) are what a
# job loads. A node pack's own model type can be added by passing `model_types` to `load_key`.
MODEL_TYPES: frozenset[str] = frozenset({DENOISER.name, TEXT_ENCODER.name, VAE.name, LLM.name})

# A range can't silently expand into millions of jobs from a typo such as `1..1e9`.
MAX_VALUES = 100_000
# Nor can a grid of several axes, each under MAX_VALUES: the product is counted before any job is built.
MAX_JOBS = 100_000

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_RANGE_RE = re.compile(rf"^\s*({_NUMBER})\s*\.\.\s*({_NUMBER})\s*(?::\s*({_NUMBER})\s*)?$")


class SweepError(ValueError):
    """A sweep flag that cannot be used; the message names the flag."""


@dataclass(frozen=True)
class SweepAxis:
    """One swept parameter: `node.param` and the values it takes, in order."""

    node: str
    param: str
    values: tuple[Any, ...]
    flag: str = ""  # the flag as typed, for messages

    @property
    def target(self) -> str:
        return f"{self.node}.{self.param}"


@dataclass(frozen=True)
class SweepJob:
    """One run of the sweep: its position in the plan and the value of every swept parameter."""

    index: int
    values: dict[str, Any] = field(default_factory=dict)  # "node.param" -> value

    @property
    def label(self) -> str:
        """`seed=44, cfg=4.5`: the values with only the parameter names, for captions."""
        return ", ".join(f"{t.split('.', 1)[1]}={_show(v)}" for t, v in self.values.items())

    @property
    def slug(self) -> str:
        """A file-name-safe name for the job's outputs: `j003-seed-44-cfg-4.5`."""
        parts = [f"j{self.index:03d}"]
        for target, value in self.values.items():
            text = re.sub(r"[^A-Za-z0-9.+-]+", "_", _show(value)).strip("_.")[:24] or "x"
            parts.append(f"{target.split('.', 1)[1]}-{text}")
        return re.sub(r"\.\.+", ".", "-".join(parts))[:120]


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _range_values(flag: str, start: str, stop: str, step: str | None) -> list[float] | list[int]:
    is_float = any(s is not None and re.search(r"[.eE]", s) for s in (start, stop, step))
    a, b = float(start), float(stop)
    if step is None:
        d = 1.0 if b >= a else -1.0
    else:
        d = float(step)
    for text, number in ((start, a), (stop, b), (step, d)):
        if not math.isfinite(number):  # `1e400` parses as inf: no count, no int
            raise SweepError(f"{flag}: {text} is too large a number for a range")
    if d == 0 or (b - a) * d < 0:
        raise SweepError(f"{flag}: the step {step} never gets from {start} to {stop}")
    span = (b - a) / d  # 1..1e300 overflows nothing as a float, and is refused before any list is built
    count = math.floor(span + 1e-9) + 1 if math.isfinite(span) else math.inf
    if count > MAX_VALUES:
        shown = (
            f"{count:,}" if count < 10**15 else (f"about {count:.3g}" if math.isfinite(count) else "too many")
        )
        raise SweepError(f"{flag}: {shown} values; a sweep takes at most {MAX_VALUES:,}")
    if is_float:
        # a + i*d, rounded: 0.1 steps give 0.3, not 0.30000000000000004.
        return [round(a + i * d, 10) for i in range(count)]
    return [int(a) + i * int(d) for i in range(count)]


def parse_spec(spec: str, *, flag: str, base_dir: Path | None = None) -> list[Any]:
    """SPEC text -> raw values (numbers from ranges, text otherwise); `flag` names it in errors."""
    if spec.startswith("@"):
        path = Path(spec[1:]).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise SweepError(f"{flag}: cannot read {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise SweepError(f"{flag}: {path} is not UTF-8 text") from exc
        values = [line.strip() for line in lines if line.strip()]
        if not values:
            raise SweepError(f"{flag}: {path} has no values (one per line)")
        return values
    if ".." in spec:
        match = _RANGE_RE.match(spec)
        if match is None:
            raise SweepError(f"{flag}: {spec!r} is not a range; write START..STOP or START..STOP:STEP")
        return _range_values(flag, *match.groups())
    values = [v.strip() for v in spec.split(",")]
    if not spec.strip() or any(v == "" for v in values):
        raise SweepError(f"{flag}: empty value in {spec!r}; write a list such as 1,2,3")
    return values


def parse_axis(item: str, wf: Workflow, registry: NodeRegistry, *, base_dir: Path | None = None) -> SweepAxis:
    """`NODE.PARAM=SPEC` -> an axis with values typed and checked against the parameter."""
    flag = f"--sweep {item}"
    target, sep, spec = item.partition("=")
    node_id, dot, param_name = target.partition(".")
    if not sep or not dot or not node_id or not param_name:
        raise SweepError(f"{flag}: expected NODE.PARAM=SPEC, e.g. --sweep sampler.seed=1..16")
    node = wf.nodes.get(node_id)
    if node is None:
        raise SweepError(f"{flag}: no node {node_id!r} in {wf.source} (nodes: {', '.join(wf.nodes)})")
    spec_def = registry.get(node.type)
    param = spec_def.param(param_name) if spec_def else None
    if param is None:
        names = ", ".join(p.name for p in spec_def.params) if spec_def else ""
        raise SweepError(f"{flag}: {node.type} has no parameter {param_name!r} (it has: {names})")
    if param_name in node.inputs:
        link = node.inputs[param_name]
        raise SweepError(f"{flag}: {target} is fed by a wire from {link.node}.{link.output}")
    values = [param.parse(v) for v in parse_spec(spec, flag=flag, base_dir=base_dir)]
    for value in values:
        reason = param.check(value)
        if reason is not None:
            raise SweepError(f"{flag}: value {value!r} for {target}: {reason}")
    return SweepAxis(node_id, param_name, tuple(values), flag)


def plan_jobs(axes: Sequence[SweepAxis], *, zip_axes: bool = False) -> list[SweepJob]:
    """Every combination (grid; the last flag varies fastest) or the values paired in order (zip)."""
    if not axes:
        return []
    targets = [a.target for a in axes]
    duplicates = sorted({t for t in targets if targets.count(t) > 1})
    if duplicates:
        raise SweepError(f"--sweep {duplicates[0]} is given twice; put all its values in one flag")
    if zip_axes:
        lengths = {a.flag or a.target: len(a.values) for a in axes}
        if len(set(lengths.values())) > 1:
            listed = ", ".join(f"{k} ({n} values)" for k, n in lengths.items())
            raise SweepError(f"--zip pairs values in order, so every --sweep needs as many: {listed}")
        combos: Iterable[tuple[Any, ...]] = zip(*(a.values for a in axes), strict=True)
    else:
        _check_grid_size(axes)
        combos = itertools.product(*(a.values for a in axes))
    return [SweepJob(i, dict(zip(targets, combo, strict=True))) for i, combo in enumerate(combos)]


def _check_grid_size(axes: Sequence[SweepAxis]) -> None:
    """Refuse a grid of more than MAX_JOBS jobs, counted from the axes' lengths (no job built yet)."""
    count = math.prod(len(a.values) for a in axes)
    if count > MAX_JOBS:
        sizes = " x ".join(f"{a.flag or a.target} ({len(a.values):,} values)" for a in axes)
        raise SweepError(f"{sizes}: a grid of {count:,} jobs; a sweep runs at most {MAX_JOBS:,}")


def apply_job(wf: Workflow, job: SweepJob) -> Workflow:
    """A copy of the workflow with the job's values set (the original is left alone)."""
    out = wf.copy()
    for target, value in job.values.items():
        node_id, param = target.split(".", 1)
        out.nodes[node_id].params[param] = value
    return out


def _load_nodes(wf: Workflow, registry: NodeRegistry, model_types: frozenset[str]) -> set[str]:
    """Nodes that produce a model, with everything upstream of them (a path could come from a Text node)."""
    found: set[str] = set()
    stack = [
        nid
        for nid, node in wf.nodes.items()
        if (spec := registry.get(node.type)) and any(o.type.name in model_types for o in spec.outputs)
    ]
    while stack:
        nid = stack.pop()
        if nid in found:
            continue
        found.add(nid)
        stack.extend(link.node for link in wf.nodes[nid].inputs.values())
    return found


def load_key(
    wf: Workflow, registry: NodeRegistry, job: SweepJob, model_types: frozenset[str] = MODEL_TYPES
) -> str:
    """What the job loads, as far as the sweep changes it: the swept values that reach a model loader.

    Jobs with the same key share every model, so running them back to back keeps the models loaded.
    """
    loaders = _load_nodes(wf, registry, model_types)
    parts = {t: v for t, v in job.values.items() if t.split(".", 1)[0] in loaders}
    return json.dumps(parts, sort_keys=True, default=str)


def order_jobs(jobs: Sequence[SweepJob], keys: dict[int, str]) -> list[SweepJob]:
    """Jobs grouped by load key (groups in order of first appearance, jobs in plan order within a group)."""
    first: dict[str, int] = {}
    for job in jobs:
        first.setdefault(keys[job.index], len(first))
    return sorted(jobs, key=lambda j: (first[keys[j.index]], j.index))


def pick_next(
    pending: Sequence[SweepJob], keys: dict[int, str], last_key: str | None, busy_keys: Sequence[str]
) -> int:
    """Which pending job an idle worker takes (an index into `pending`, which is in `order_jobs` order).

    The next job with the worker's last key keeps its models loaded; otherwise the first job of the group
    fewest other workers are on, so two workers split two models instead of both loading both.
    """
    if last_key is not None:
        for i, job in enumerate(pending):
            if keys[job.index] == last_key:
                return i
    best, best_load = 0, None
    seen: set[str] = set()
    for i, job in enumerate(pending):
        key = keys[job.index]
        if key in seen:
            continue
        seen.add(key)
        load = busy_keys.count(key)
        if best_load is None or load < best_load:
            best, best_load = i, load
    return best
