"""A seeded mutator of workflow files: broken, hostile and absurd variants of every shipped workflow.

Lives here: `Mutant`, `MUTATIONS`, `generate_mutants`, `check_file`. Imports `app.comfy_commands` (the
reading `app --run` does), `pipelines.models_library`, `tests.hostile_files`; used by
tests/test_fuzz_workflows.py (a seeded sample) and benchmarks/fuzz_workflows.py (the full 1,000).
Also here, apart: `InputMutant`, `INPUT_MUTATIONS` ("sweep products", "GGUF array sizes"),
`generate_input_mutants`, `check_input`, for what a run gets besides its workflow (tests/test_fuzz_inputs.py).

Each mutant is the bytes of a file plus whether it must be refused (`must_fail`): a mutation such as a
byte flip inside a string may leave a valid workflow, which is fine; a dangling link may not.
`check_file` goes through the same code path as `app --run` up to the point where the run would start
(read, parse, validate; a ComfyUI file or PNG is imported on the way) and returns the exit code and the
message a user would see. Two kinds turn the workflow into another tool's hostile file: ComfyUI subgraphs
that contain themselves or fan out (`subgraph_breadth`), and PNG bombs (`png_bomb`).
"""

from __future__ import annotations

import copy
import json
import random
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.comfy_commands import load_run_workflow
from nodes.png_text import NODELOOM_KEY
from nodes.registry import NodeRegistry
from nodes.workflow import WorkflowError, load_workflow
from nodes.workflow_json import MAX_FILE_BYTES
from pipelines.models_library import ModelsLibrary
from tests.hostile_files import (
    deep_json,
    png_bytes,
    png_chunk,
    self_containing_ui,
    shared_value_ui,
    text_chunk,
    wide_subgraphs_ui,
    ztxt_bomb,
)

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted((REPO / "resources/workflows").glob("*.json"))
MB = 2**20


@dataclass(frozen=True)
class Mutant:
    name: str  # "<workflow>-<mutation>-<index>"
    mutation: str
    data: bytes
    must_fail: bool
    suffix: str = ".json"


# A mutation takes the workflow (dict, a fresh copy), its text and the rng; returns (bytes, must_fail), or
# (bytes, must_fail, suffix) for a file that is not named .json.
Mutation = Callable[[dict[str, Any], str, random.Random], tuple[bytes, bool] | tuple[bytes, bool, str]]


def _dump(data: Any) -> bytes:
    return json.dumps(data, indent=2).encode()


def _node(data: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any]]:
    node_id = rng.choice(sorted(data["nodes"]))
    return node_id, data["nodes"][node_id]


def _linked(data: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any]] | None:
    with_inputs = sorted(n for n, v in data["nodes"].items() if v.get("inputs"))
    if not with_inputs:
        return None
    node_id = rng.choice(with_inputs)
    return node_id, data["nodes"][node_id]


_WRONG_VALUES: list[Any] = [None, True, False, "12", "", [], [1, 2], {}, {"a": 1}, 3.5, -7, 0]


def param_wrong_type(data, text, rng):
    _, node = _node(data, rng)
    params = node.setdefault("params", {})
    name = rng.choice(sorted(params)) if params else "value"
    old = params.get(name)
    candidates = [v for v in _WRONG_VALUES if type(v) is not type(old)]
    params[name] = rng.choice(candidates)
    return _dump(data), False


def missing_field(data, text, rng):
    where = rng.choice(["format", "version", "nodes", "type", "params", "inputs"])
    if where in ("format", "version", "nodes"):
        del data[where]
        return _dump(data), True
    _, node = _node(data, rng)
    node.pop(where, None)
    return _dump(data), where == "type"


def unknown_node(data, text, rng):
    _, node = _node(data, rng)
    node["type"] = rng.choice([node["type"].lower(), node["type"] + "X", "Nope", "", "__import__", "a" * 300])
    return _dump(data), True


def dangling_link(data, text, rng):
    found = _linked(data, rng)
    if found is None:
        return unknown_node(data, text, rng)
    _, node = found
    port = rng.choice(sorted(node["inputs"]))
    source, output = node["inputs"][port]
    node["inputs"][port] = rng.choice([["ghost", output], [source, "no_such_output"], ["", ""]])
    return _dump(data), True


def cycle(data, text, rng):
    found = _linked(data, rng)
    if found is None:
        return unknown_node(data, text, rng)
    node_id, node = found
    port = rng.choice(sorted(node["inputs"]))
    upstream = data["nodes"][node["inputs"][port][0]]
    upstream.setdefault("inputs", {})[rng.choice(sorted(node["inputs"]))] = [node_id, "x"]
    upstream["inputs"].update({k: [node_id, k] for k in list(upstream["inputs"])[:1]})
    return _dump(data), True


_NUMBERS = ["1e308", "-1e308", "1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1" + "0" * 40, "-1", "0"]
_NUMBERS += ["-9223372036854775808", "18446744073709551616", "0.5", "2147483648", "-0.0", "1e-320"]


def bad_number(data, text, rng):
    node_id, node = _node(data, rng)
    params = node.setdefault("params", {})
    name = rng.choice(sorted(params)) if params else "value"
    number = rng.choice(_NUMBERS)
    params[name] = "@@NUMBER@@"
    raw = _dump(data).replace(b'"@@NUMBER@@"', number.encode())
    return raw, number in ("1e400", "-1e400", "NaN", "Infinity", "-Infinity") or len(number) > 30


def wrong_json_type(data, text, rng):
    choice = rng.randrange(7)
    if choice == 0:
        return _dump(rng.choice([[], "workflow", 42, None, True, [data]])), True
    if choice == 1:
        data["nodes"] = rng.choice([[], "nodes", 3, list(data["nodes"].values())])
        return _dump(data), True
    node_id, node = _node(data, rng)
    if choice == 2:
        data["nodes"][node_id] = rng.choice([[], "Text", 1, None])
    elif choice == 3:
        node["params"] = rng.choice([[], "p", 1])
    elif choice == 4:
        node["inputs"] = rng.choice([[], "i", 1])
    elif choice == 5:
        node["inputs"] = {"x": rng.choice([{"node": "a"}, "a.b", ["a"], ["a", "b", "c"], [1, 2], None])}
    else:
        data["version"] = rng.choice(["1", 1.0, None, [1], 2])
    return _dump(data), True


def _deep(depth: int) -> str:
    opener = random.Random(depth).choice(["[", '{"k": '])
    closer = "]" if opener == "[" else "}"
    return opener * depth + "0" + closer * depth


def deep_nesting(data, text, rng):
    depth = rng.choice([65, 200, 700, 1000, 5000, 100_000])
    where = rng.choice(["meta", "ui", "param", "top"])
    if where == "top":
        return _deep(depth).encode(), True
    if where == "param":
        _, node = _node(data, rng)
        node.setdefault("params", {})["deep"] = "@@DEEP@@"
    else:
        data.setdefault(where, {})["deep"] = "@@DEEP@@"
    return _dump(data).replace(b'"@@DEEP@@"', _deep(depth).encode()), True


def non_utf8(data, text, rng):
    choice = rng.randrange(4)
    if choice == 0:
        return text.replace('"', '"\u00e9', 3).encode("latin-1", "replace"), True
    if choice == 1:
        return text.encode(rng.choice(["utf-16", "utf-16-le", "utf-32"])), True
    raw = bytearray(text.encode())
    for _ in range(rng.randint(1, 5)):
        raw.insert(rng.randrange(len(raw)), rng.choice([0xFF, 0xC0, 0x80, 0xFE]))
    if choice == 3:
        return b"\x89PNG\r\n\x1a\n" + bytes(raw), True  # a damaged "PNG" renamed .json
    return bytes(raw), True


def truncation(data, text, rng):
    end = text.rindex("}")
    return text[: rng.randrange(0, end)].encode(), True


def duplicate_key(data, text, rng):
    if rng.random() < 0.5:
        key = rng.choice(["version", "format", "nodes", "meta"])
        dup = f'"{key}": {json.dumps(data.get(key, 1))}, '
        return ("{" + dup + text.lstrip()[1:]).encode(), True
    node_id = rng.choice(sorted(data["nodes"]))
    at = text.index('"nodes": {') + len('"nodes": {')
    dup = f'"{node_id}": {{"type": "Text", "params": {{}}}}, '
    return (text[:at] + dup + text[at:]).encode(), True


def multi_mb_string(data, text, rng):
    big = rng.choice(["x", "é", "🙂", "a b "]) * (rng.randint(1, 4) * MB // 4)
    target = rng.choice(["text", "meta", "node_id", "link", "type", "param_name", "prefix"])
    node_id, node = _node(data, rng)
    must_fail = True
    if target == "text":
        texts = [
            (n, p)
            for n, v in data["nodes"].items()
            for p, x in v.get("params", {}).items()
            if p in ("text", "prompt")
        ]
        if texts:
            n, p = rng.choice(texts)
            data["nodes"][n]["params"][p] = big
            must_fail = False
        else:
            data["meta"]["description"] = big
            must_fail = False
    elif target == "meta":
        data.setdefault("meta", {})["description"] = big
        must_fail = False
    elif target == "node_id":
        data["nodes"][big] = {"type": "Nope"}
    elif target == "link":
        node.setdefault("inputs", {})["x"] = [big, big]
    elif target == "type":
        node["type"] = big
    elif target == "param_name":
        node.setdefault("params", {})[big] = 1
    else:
        saves = [v for v in data["nodes"].values() if v["type"].startswith("Save")]
        (saves[0] if saves else node).setdefault("params", {})["prefix"] = big
    return _dump(data), must_fail


def byte_flip(data, text, rng):
    raw = bytearray(text.encode())
    for _ in range(rng.randint(1, 8)):
        raw[rng.randrange(len(raw))] = rng.randrange(32, 127)
    return bytes(raw), False


def lone_surrogate(data, text, rng):
    where = rng.choice(["node_id", "text", "meta", "key"])
    node_id, node = _node(data, rng)
    if where == "node_id":
        data["nodes"][node_id + "\ud800"] = data["nodes"].pop(node_id)
    elif where == "text":
        node.setdefault("params", {})["text"] = "abc \udfff"
    elif where == "meta":
        data.setdefault("meta", {})["title"] = "\ud83d"
    else:
        node.setdefault("params", {})["\udc00"] = 1
    return json.dumps(data).encode(), True


def bad_prefix(data, text, rng):
    saves = [v for v in data["nodes"].values() if v["type"].startswith("Save")]
    if not saves:
        return unknown_node(data, text, rng)
    rng.choice(saves).setdefault("params", {})["prefix"] = rng.choice(
        ["", ".", "..", "../../escape", "/etc/passwd", "a/b", "a\\b", "x\x00y", "p" * 500]
    )
    return _dump(data), True


def format_width(data, text, rng):
    template = rng.choice(
        ["{a:>200000000}", "{a:.999999999}", "{a:{b}}", "{a.__class__}", "{d}", "{a[0]}", "{"]
    )
    data["nodes"]["fmt_fuzz"] = {"type": "FormatText", "params": {"template": template}, "inputs": {}}
    return _dump(data), True


def node_version(data, text, rng):
    _, node = _node(data, rng)
    node["version"] = rng.choice([1.5, "1", True, 0, -3, 99, None, [1]])
    return _dump(data), node["version"] is not None


def empty_or_junk(data, text, rng):
    return rng.choice([b"", b"   \n", b"null", b"{}", b"[]", b"\x00" * 64, b"\xef\xbb\xbf"]), True


def subgraph_breadth(data, text, rng):
    """A ComfyUI UI file whose subgraphs would expand without end or past every total."""
    choice = rng.randrange(4)
    if choice == 0:
        ui = self_containing_ui(copies=rng.randint(1, 6))
    elif choice == 1:
        ui = self_containing_ui(copies=rng.randint(1, 4), through=True)
    elif choice == 2:
        ui = wide_subgraphs_ui(levels=rng.randint(4, 7), width=rng.randint(11, 16))  # > 10,000 nodes
    else:
        chars = rng.randint(1, 3) * MB
        ui = shared_value_ui(chars, instances=MAX_FILE_BYTES // chars + 2)  # past the expanded size
    return json.dumps(ui).encode(), True


def png_bomb(data, text, rng):
    """A PNG whose chunks are hostile: an inflating zTXt, a huge declared size, a deep, doubled or lying
    chunk; under Nodeloom's key or ComfyUI's, sometimes renamed .json (read by its content)."""
    key = rng.choice([NODELOOM_KEY, "prompt", "workflow"])
    ours = text_chunk(NODELOOM_KEY, text, b"iTXt")
    choice = rng.randrange(6)
    if choice == 0:
        chunks, size = [ztxt_bomb(key, MAX_FILE_BYTES + 10)], 2
    elif choice == 1:
        chunks, size = [ours], rng.choice([20_000, 100_000, 2**31 - 1])  # a valid workflow, 4e8+ pixels
    elif choice == 2:
        chunks, size = [text_chunk(key, deep_json(rng.choice([65, 1000, 100_000])))], 2
    elif choice == 3:
        chunks, size = [ours, ours] if key == NODELOOM_KEY else [text_chunk(key, "{}")] * 2, 2
    elif choice == 4:
        chunks, size = [png_chunk(b"tEXt", key.encode() + b"\0{}", length=rng.choice([2**28, 2**31]))], 2
    else:
        chunks, size = [ours.replace(b'"nodes"', b'"nodez"')], 2  # a checksum that no longer matches
    return png_bytes(chunks, width=size, height=size), True, rng.choice([".png", ".png", ".json"])


MUTATIONS: dict[str, Mutation] = {
    "param_wrong_type": param_wrong_type,
    "missing_field": missing_field,
    "unknown_node": unknown_node,
    "dangling_link": dangling_link,
    "cycle": cycle,
    "bad_number": bad_number,
    "wrong_json_type": wrong_json_type,
    "deep_nesting": deep_nesting,
    "non_utf8": non_utf8,
    "truncation": truncation,
    "duplicate_key": duplicate_key,
    "multi_mb_string": multi_mb_string,
    "byte_flip": byte_flip,
    "lone_surrogate": lone_surrogate,
    "bad_prefix": bad_prefix,
    "format_width": format_width,
    "node_version": node_version,
    "empty_or_junk": empty_or_junk,
    "subgraph_breadth": subgraph_breadth,
    "png_bomb": png_bomb,
}


def generate_mutants(count: int, seed: int = 0) -> Iterator[Mutant]:
    """`count` mutants, cycling through every shipped workflow and every mutation, seeded."""
    rng = random.Random(seed)
    sources = [(p.stem, p.read_text(encoding="utf-8")) for p in SHIPPED]
    parsed = [json.loads(t) for _, t in sources]
    kinds = sorted(MUTATIONS)
    for i in range(count):
        (stem, text), data = sources[i % len(sources)], parsed[i % len(sources)]
        kind = kinds[(i // len(sources)) % len(kinds)] if count >= len(kinds) else rng.choice(kinds)
        raw, must_fail, *suffix = MUTATIONS[kind](copy.deepcopy(data), text, rng)
        yield Mutant(f"{stem}-{kind}-{i:04d}", kind, raw, must_fail, *suffix)


@dataclass(frozen=True)
class Checked:
    exit_code: int  # what `app --run` would return before running: 2 invalid, 0 would run
    message: str
    error: BaseException | None = None  # anything but a WorkflowError: a traceback reaching the user


def check_file(path: Path, registry: NodeRegistry) -> Checked:
    """Read, parse and validate `path` as `app --run` does (with no models folder), without running it."""
    try:
        load_run_workflow(path, registry, ModelsLibrary([]))
    except WorkflowError as exc:
        return Checked(2, f"error: {exc}")
    except Exception as exc:  # noqa: BLE001  (the point: any other exception is a defect)
        return Checked(1, f"{type(exc).__name__}: {exc}"[:2000], exc)
    return Checked(0, "")


# -- Other inputs: sweep flags and GGUF model files ------------------------------------------------------
# Kept apart from the workflow mutations above: these mutate what a run is given besides its workflow file,
# and each is checked through the code that reads it (`prepare_sweep`, `open_gguf_reader`).

INPUT_WORKFLOW = REPO / "resources/workflows/txt2img.json"


@dataclass(frozen=True)
class InputMutant:
    name: str  # "<mutation>-<index>"
    mutation: str
    sweep: tuple[str, ...] = ()  # --sweep flags (sweep_products)
    data: bytes = b""  # a file's bytes (gguf_array_sizes)


def sweep_products(rng: random.Random) -> tuple[str, ...]:
    """Flags each within the per-axis cap whose grid is past the job cap, or a range end past a float."""
    if rng.random() < 0.3:
        spec = rng.choice(["1..1e400", "-1e400..5", "0..1:1e400", "1..1e300", "0..1:1e-320"])
        return (f"sampler.seed={spec}",)
    seeds = rng.randint(400, 100_000)
    steps = rng.randint(max(2, 100_001 // seeds + 1), 1000)  # seeds x steps > 100,000 jobs
    flags = [f"sampler.seed=0..{seeds - 1}", f"sampler.steps=1..{steps}"]
    if rng.random() < 0.5:
        flags.append(f"sampler.cfg=1..{rng.randint(2, 9)}:0.5")
    rng.shuffle(flags)
    return tuple(flags)


def _gguf_key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


def gguf_array_sizes(rng: random.Random) -> bytes:
    """A small GGUF whose header declares an array, string, key, tensor or dimension count it cannot hold."""
    huge = rng.choice([2**60, 2**63 - 1, 2**40, 2**32 + 7])
    good = _gguf_key("general.architecture") + struct.pack("<I", 8) + _gguf_key("llama")
    where = rng.choice(["array", "string_array", "string", "kv_count", "tensor_count", "dims", "nested"])
    n_tensors, n_kv, tail = 0, 2, b""
    if where == "array":
        tail = _gguf_key("a") + struct.pack("<IIQ", 9, rng.choice([0, 4, 6, 10, 12]), huge)
    elif where == "string_array":
        tail = _gguf_key("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, huge)
    elif where == "string":
        tail = _gguf_key("general.name") + struct.pack("<IQ", 8, huge)
    elif where == "nested":
        tail = _gguf_key("a") + struct.pack("<IIQ", 9, 9, 1) + struct.pack("<IQ", 0, huge)
    elif where == "kv_count":
        n_kv = huge
    elif where == "tensor_count":
        n_tensors, n_kv = huge, 1
    else:
        n_tensors, n_kv = 1, 1
        tail = _gguf_key("w") + struct.pack("<I", rng.choice([2**32 - 1, 2**20, 9])) + bytes(32)
    header = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)
    return header + good + tail + bytes(rng.randint(0, 64))


INPUT_MUTATIONS: dict[str, Callable[[random.Random], Any]] = {
    "sweep_products": sweep_products,
    "gguf_array_sizes": gguf_array_sizes,
}


def generate_input_mutants(count: int, seed: int = 0) -> Iterator[InputMutant]:
    """`count` input mutants, alternating the kinds, seeded; every one must be refused."""
    rng = random.Random(seed)
    kinds = sorted(INPUT_MUTATIONS)
    for i in range(count):
        kind = kinds[i % len(kinds)]
        made = INPUT_MUTATIONS[kind](rng)
        if kind == "sweep_products":
            yield InputMutant(f"{kind}-{i:04d}", kind, sweep=made)
        else:
            yield InputMutant(f"{kind}-{i:04d}", kind, data=made)


def check_input(mutant: InputMutant, folder: Path, registry: NodeRegistry) -> Checked:
    """Read the mutated input as a run would; exit 2 for a refused sweep flag, 1 for a refused model file."""
    from nodes.sweep import SweepError
    from pipelines.weight_format import DamagedWeightsError, open_gguf_reader

    try:
        if mutant.mutation == "sweep_products":
            from app.batch.execute import prepare_sweep

            prepare_sweep(load_workflow(INPUT_WORKFLOW, registry), list(mutant.sweep), registry)
        else:
            path = folder / f"{mutant.name}.gguf"
            path.write_bytes(mutant.data)
            open_gguf_reader(path)
    except SweepError as exc:
        return Checked(2, f"error: {exc}")
    except DamagedWeightsError as exc:
        return Checked(1, str(exc))
    except Exception as exc:  # noqa: BLE001  (the point: any other exception is a defect)
        return Checked(1, f"{type(exc).__name__}: {exc}"[:2000], exc)
    return Checked(0, "")
