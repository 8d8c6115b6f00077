"""The offload policies as values: what each one does is data (`Policy`), and `POLICIES` is the one list.

Lives here: `Policy`, `POLICIES`, `POLICY_NAMES`, `policy_named`. May import: stdlib only.
`app/` (CLI choices, the settings dialog) and `MemoryConfig` read `POLICY_NAMES`; nothing else lists them.
`memory.placement` and `MemoryManager` read the flags, never the names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    """How the memory manager places models. Compare policies by value or by `.name`.

    may_evict: a load that doesn't fit may evict unlocked models (False: it fails with BudgetExceeded).
    unloads_after_use: a model leaves the device once the next node to run doesn't use it.
    streams_when_too_big: a model that can't fit even alone is streamed (as many blocks resident as fit).
    prefers_streaming: a model with declared blocks always goes through streaming placement, keeping only
        as many blocks resident as fit beside the working memory.
    """

    name: str
    may_evict: bool
    unloads_after_use: bool
    streams_when_too_big: bool
    prefers_streaming: bool
    help: str

    def __str__(self) -> str:
        return self.name


NONE = Policy("none", False, False, False, False, "everything stays on the device; nothing is evicted")
AUTO = Policy(
    "auto", True, False, True, False, "keep models resident while they fit, evict the least recently used"
)
SEQUENTIAL = Policy(
    "sequential", True, True, True, False, "load right before use, unload when the next node doesn't need it"
)
STREAM = Policy(
    "stream", True, True, True, True, "as sequential, and stream weights block by block beyond the budget"
)

POLICIES: tuple[Policy, ...] = (NONE, AUTO, SEQUENTIAL, STREAM)
"""From loosest to strictest; an out-of-memory retry walks this order."""

POLICY_NAMES: tuple[str, ...] = tuple(p.name for p in POLICIES)


def policy_named(name: str | Policy) -> Policy:
    if isinstance(name, Policy):
        return name
    for policy in POLICIES:
        if policy.name == name:
            return policy
    raise ValueError(f"unknown memory policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")


def stricter(policy: Policy) -> Policy | None:
    """The next policy in `POLICIES`, or None for the strictest."""
    i = POLICIES.index(policy)
    return POLICIES[i + 1] if i + 1 < len(POLICIES) else None
