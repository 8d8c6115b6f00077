"""Will a model ever fit? The least a component must hold on the device, from its file headers alone.

Lives here: `block_sizes`, `least_resident_bytes`, `budget_problem`. May import: stdlib, memory.errors, memory.ledger,
memory.weights (headers only: nothing is built or read).

A run whose budget is smaller than what its first model must hold would only find out when that model
loads, after every node before it ran. This is the check made before any load (the executor asks before
the first node that uses a model; a future `app plan` can ask the same): a lower bound, so it never refuses
what some policy could run. A component that cannot stream must hold all its weights. One that can stream
(every policy may end up streaming it: `auto` streams a model too big to fit, an out-of-memory retry moves
to a stricter policy) must hold at least its weights outside the streamed blocks plus its largest block.
Where the bound can't be told from headers (a single-file checkpoint's names differ from the module's),
there is none, and the run finds out as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from memory.errors import fmt_bytes
from memory.ledger import Ledger, ModelHandle
from memory.weights import header_tensor_bytes


def block_sizes(h: ModelHandle) -> tuple[int, list[int]] | None:
    """(bytes outside the streamed blocks, bytes of each block in declaration order), from the headers, or
    None when the headers can't tell (no files, or a single-file checkpoint whose names differ)."""
    if not h.spec.files or h.spec.prefixes or not h.spec.blocks:
        return None
    block_of = re.compile(rf"^({'|'.join(re.escape(b) for b in h.spec.blocks)})\.(\d+)\.")
    fixed, blocks = 0, {}
    for key, size in header_tensor_bytes(h.spec.files, h.spec.cast_dtype):
        match = block_of.match(key)
        if match is None:
            fixed += size
        else:
            slot = (h.spec.blocks.index(match.group(1)), int(match.group(2)))
            blocks[slot] = blocks.get(slot, 0) + size
    return fixed, [blocks[slot] for slot in sorted(blocks)]


def _streamed_bound(h: ModelHandle) -> int | None:
    """Bytes outside the blocks + the largest block, from the headers (names there are the module's)."""
    sizes = block_sizes(h)
    if sizes is None:
        return None
    return sizes[0] + max(sizes[1], default=0)


def least_resident_bytes(h: ModelHandle, can_stream: bool) -> int | None:
    """The least `h` must hold on the device under any policy, or None when the headers can't tell."""
    if h.weight_bytes is None:
        return None
    if not can_stream:
        return h.weight_bytes
    bound = _streamed_bound(h)
    return None if bound is None else min(bound, h.weight_bytes)


def budget_problem(
    handles: Iterable[ModelHandle], ledger: Ledger, can_stream: Callable[[ModelHandle], bool]
) -> str | None:
    """Why the first of `handles` that can never fit in `ledger`'s budget won't (a sentence), or None.

    The room is `ledger.models_budget()`: on a CPU, the RAM budget less what the process itself holds."""
    room, device = ledger.models_budget(), ledger.device.type
    held = ledger.baseline_note()
    for h in handles:
        need = least_resident_bytes(h, can_stream(h))
        if need is not None and need > room:
            how = (
                "its weights outside the streamed blocks plus its largest block"
                if can_stream(h)
                else "its weights, from the file headers"
            )
            budget = fmt_bytes(ledger.device_budget) + (
                f"; {held}, leaving {fmt_bytes(room)}" if held else ""
            )
            return (
                f"the {device} memory budget ({budget}) is too small for {h.spec.name}: it needs at "
                f"least {fmt_bytes(need)} ({how}) before any working memory; nothing was loaded"
            )
    return None
