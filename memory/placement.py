"""Placer: the policy decisions behind `MemoryManager.use`: build, load, stream, evict, make room.

May import: stdlib, torch, memory.errors, memory.ledger, memory.patches, memory.policy, memory.policies.*,
memory.release, memory.telemetry, memory.weights (never memory.manager: the placer gets its inputs, it doesn't
reach back).
Runs on the compute thread only; every change ends with `_account`, which re-reads where each tensor of
the module actually is (and the originals a fused weight patch keeps beside it), so the ledger reports
facts rather than intentions.
"""

from __future__ import annotations

import time
from itertools import accumulate

import torch

from memory.errors import BudgetExceeded
from memory.ledger import Ledger, ModelHandle
from memory.patches import LayerPatch, PatchState, apply_patches, fused_bytes, patch_state, remove_patches
from memory.policies.lru import plan_eviction
from memory.policies.resident import ResidentConfig, apply_resident, offload_module
from memory.policies.stream import StreamConfig, apply_streaming, remove_streaming
from memory.policy import Policy
from memory.release import malloc_trim
from memory.telemetry import LoadEvent, LoadProgress, Telemetry, TransferEvent, UnloadEvent
from memory.weights import block_names, fill_empty, module_bytes, named_tensors


def _pinned(t: torch.Tensor) -> bool:
    try:
        return t.is_pinned()
    except RuntimeError:
        return False


def _strip(module: torch.nn.Module) -> None:
    """Replace every weight with an empty tensor, so the memory goes even if a caller still holds the module.

    A node that kept `module` from `with mm.use(h) as module:` in a local would otherwise pin all of its
    weights after the manager let go (the release that `gc.collect()` + `malloc_trim` rely on never happens).
    The originals a fused patch keeps go too: the module they belong to is gone.
    """
    state = patch_state(module)
    if state is not None:
        state.originals.clear()
    for sub in module.modules():
        for p in sub._parameters.values():
            if p is not None:
                p.data = torch.empty(0, dtype=p.dtype, device=p.device)
        for name, b in sub._buffers.items():
            if b is not None:
                sub._buffers[name] = torch.empty(0, dtype=b.dtype, device=b.device)


class Placer:
    """Moves models between disk, host and device for one ledger, reporting each move to `telemetry`.

    The policy is an argument of each decision (`place`, `make_room`), not state: an OOM retry can switch
    policy between two calls.
    """

    def __init__(self, ledger: Ledger, device: torch.device, telemetry: Telemetry) -> None:
        self.ledger = ledger
        self.device = device
        self.telemetry = telemetry
        # Per handle key: bytes of each streamable block at the run dtype, and of the whole module.
        self._block_bytes: dict[str, list[int]] = {}
        self._full_bytes: dict[str, int] = {}

    @property
    def accel(self) -> bool:
        return self.device.type != "cpu"

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _over_budget(self, what: str, needs: int, has: int, policy: Policy | None) -> BudgetExceeded:
        head = f"memory policy: {policy.name}\n" if policy is not None else ""
        return BudgetExceeded(what, needs, has, head + self.ledger.text(), self.ledger.baseline_note())

    def can_stream(self, h: ModelHandle) -> bool:
        if not h.spec.blocks:
            return False
        if self.device.type == "cuda":
            return True
        has_source = h.spec.source is not None or (bool(h.spec.files) and not h.spec.prefixes)
        return self.device.type == "cpu" and has_source

    # -- bookkeeping ------------------------------------------------------------------------------------

    def _account(self, h: ModelHandle) -> None:
        dev = host = pinned = 0
        if h.module is not None:
            tensors = [t for _, t in named_tensors(h.module)]
            state = patch_state(h.module)
            if state is not None:  # fused: each patched layer's original, beside its fused copy
                tensors += state.originals.values()
            for t in tensors:
                n = t.numel() * t.element_size()
                if t.device.type == self.device.type:
                    dev += n
                elif _pinned(t):
                    pinned += n
                else:
                    host += n
        if h.stream is not None:
            pinned += h.stream.pinned_bytes()
        h.device_bytes, h.host_bytes, h.pinned_bytes = dev, host, pinned

    def _build(self, h: ModelHandle) -> None:
        if h.spec.source is None:  # a whole build is its load: 0 now, the ledger's bytes once built
            self.telemetry.progress(LoadProgress(h.spec.name, 0, h.weight_bytes or 0))
        module = h.spec.build()
        h.module = module
        full = module_bytes(module, h.spec.cast_dtype)  # metadata only: shapes and dtypes, no data touched
        if (
            h.weight_bytes is None or h.spec.planned_bytes is not None
        ):  # an estimate: the build's bytes replace it
            h.weight_bytes = full
        if h.spec.source is None:
            self.telemetry.progress(LoadProgress(h.spec.name, h.weight_bytes, h.weight_bytes))
        # Non-persistent buffers are in the module but not the files: budget for whichever is larger.
        self._full_bytes[h.key] = max(full, h.weight_bytes)
        if h.spec.blocks:
            self._block_bytes[h.key] = [
                module_bytes(module.get_submodule(n), h.spec.cast_dtype)
                for n in block_names(module, h.spec.blocks)
            ]

    def full_bytes(self, h: ModelHandle) -> int:
        return self._full_bytes.get(h.key, h.weight_bytes or 0)

    # -- placing ----------------------------------------------------------------------------------------

    def place(self, h: ModelHandle, working: int, policy: Policy) -> int:
        """Make `h` runnable on the device per `policy`, with `working` bytes free beside it.

        Returns the streaming window (extra bytes the caller must reserve while it runs)."""
        before, t0 = h.location, time.perf_counter()
        if (
            h.module is None
            and h.weight_bytes is not None
            and not (policy.prefers_streaming and self.can_stream(h))
        ):
            # Check before building: a model that can't fit shouldn't be read from disk at all.
            if not policy.may_evict:
                self.make_room(h.weight_bytes + working, f"loading {h.spec.name}", h, policy)
        built = h.module is None
        if built:
            self._build(h)
        # Quantized storage: the largest layer's upcast copy exists while it runs.
        upcast = int(getattr(h.module, "_nodeloom_upcast_bytes", 0))
        try:
            window = self._place_built(h, working + upcast, policy) + upcast
        except BudgetExceeded:
            if built and h.device_bytes == 0:
                # Nothing of it was placed: don't keep a module the ledger can't see.
                self.evict(h, to_disk=True)
            raise
        self._sync()
        after = h.location
        if after != before:
            self.telemetry.emit(
                LoadEvent(h.spec.name, h.spec.kind, h.device_bytes, time.perf_counter() - t0, before, after)
            )
        return window

    def _place_built(self, h: ModelHandle, working: int, policy: Policy) -> int:
        if policy.prefers_streaming and self.can_stream(h):
            return self._stream(h, working, policy)
        if h.stream is None and h.device_bytes >= self.full_bytes(h):
            self.make_room(working, f"working memory of {h.spec.name}", h, policy)
            return 0
        need = self.full_bytes(h) - h.device_bytes + working
        try:
            self.make_room(need, f"loading {h.spec.name}", h, policy)
        except BudgetExceeded:
            if not policy.streams_when_too_big or not self.can_stream(h):
                raise
            return self._stream(h, working, policy)
        self._load_full(h)
        return 0

    def _load_full(self, h: ModelHandle) -> None:
        assert h.module is not None
        if h.stream is not None:
            remove_streaming(h.module)
            h.stream = None
        moving = max(self.full_bytes(h) - h.device_bytes, 0)
        self._sync()
        t0 = time.perf_counter()
        if h.spec.source is not None:
            fill_empty(h.module, h.spec.source, h.spec.dtype)  # built empty: load it tensor by tensor
        apply_resident(h.module, ResidentConfig(self.device, h.spec.cast_dtype))
        self._sync()
        seconds = time.perf_counter() - t0
        self._account(h)
        if self.accel and moving:
            gbps = moving / seconds / 1e9 if seconds > 0 else 0.0
            self.telemetry.emit(TransferEvent(h.spec.name, moving, seconds, gbps))

    def _stream(self, h: ModelHandle, working: int, policy: Policy) -> int:
        """Keep as many blocks resident as fit beside the streaming window; stream the rest.

        The room is the ledger's (`device_free`): on a CPU the RAM budget less the process's own RSS, so the
        blocks kept leave room for the interpreter and libraries and the run's RSS stays within the budget."""
        assert h.module is not None
        sizes = self._block_bytes[h.key]
        fixed = self.full_bytes(h) - sum(sizes)
        window = max(sizes, default=0) * (2 if self.device.type == "cuda" else 1)
        least = fixed + window + working
        if least > self.ledger.device_free() + h.device_bytes:
            self.make_room(least - h.device_bytes, f"streaming {h.spec.name}", h, policy)
        room = self.ledger.device_free() + h.device_bytes
        if fixed + sum(sizes) + working <= room:
            count = len(sizes)  # everything fits: no window needed
        else:
            if least > room:
                raise self._over_budget(f"streaming {h.spec.name}", least, room, policy)
            count, total = 0, least
            for size in sizes:
                if total + size > room:
                    break
                total += size
                count += 1
        self._apply_stream(h, count)
        self._account(h)
        return h.stream.window_bytes()

    # -- weight patches ---------------------------------------------------------------------------------

    def patch(
        self, h: ModelHandle, layers: dict[str, LayerPatch], mode: str, signature: tuple, policy: Policy
    ) -> PatchState:
        """Apply `layers` to the placed `h` (memory.patches) and count what the patch keeps.

        Fused keeps each patched layer's original beside its fused copy: on the CPU both are in RAM, so room
        for one copy is made first (evicting per `policy`, else BudgetExceeded); on an accelerator the
        originals wait in host memory (the host tier is trimmed after, as after any move). On the fly holds
        nothing between forwards.
        """
        if h.module is None:
            raise RuntimeError(f"{h.spec.name} is not placed: patch it inside `use`")
        if mode == "fused" and not self.accel:
            self.make_room(fused_bytes(layers), f"fused weight patches of {h.spec.name}", h, policy)
        state = apply_patches(h.module, layers, mode=mode, signature=signature)
        self._recount(h)
        return state

    def unpatch(self, h: ModelHandle) -> PatchState | None:
        if h.module is None:
            return None
        state = remove_patches(h.module)
        self._recount(h)
        return state

    def _recount(self, h: ModelHandle) -> None:
        self._account(h)
        if self.accel:
            self._trim_host_tier()

    # -- evicting ---------------------------------------------------------------------------------------

    def keeps_host_copy(self, h: ModelHandle, to_disk: bool) -> bool:
        """Whether evicting `h` keeps its weights in host RAM (an accelerator, and the RAM budget allows)."""
        budget = self.ledger.host_budget
        return (
            self.accel
            and not to_disk
            and budget is not None
            and self.ledger.host_used() - h.host_bytes - h.pinned_bytes + self.full_bytes(h) <= budget
        )

    def evict(self, h: ModelHandle, *, to_disk: bool = False) -> None:
        """Take `h` off the device: to host RAM on an accelerator when the RAM budget allows, else to disk."""
        if h.module is None or h.is_locked:
            return
        # What this frees: device bytes, or for a model already off the device, its host copies.
        freed = h.device_bytes or (h.host_bytes + h.pinned_bytes)
        t0 = time.perf_counter()
        if h.stream is not None:
            remove_streaming(h.module)
            h.stream = None
        keep = self.keeps_host_copy(h, to_disk)
        if keep:
            offload_module(h.module)
        else:
            # Stripping frees the tensors deterministically, so no `gc.collect()` is needed (it costs ~0.3 s per
            # call in a process holding torch + diffusers); glibc still needs the trim to return the pages.
            _strip(h.module)
            h.module = None
            malloc_trim()
        self._sync()
        self._account(h)
        self.telemetry.emit(UnloadEvent(h.spec.name, freed, time.perf_counter() - t0))
        if keep:
            self._trim_host_tier()

    def _trim_host_tier(self) -> None:
        budget = self.ledger.host_budget
        if budget is None:
            return
        while self.ledger.host_used() > budget:
            idle = [
                h
                for h in self.ledger.handles.values()
                if not h.is_locked and h.device_bytes == 0 and (h.host_bytes or h.pinned_bytes)
            ]
            if not idle:
                return
            self.evict(min(idle, key=lambda h: h.last_used), to_disk=True)

    def _apply_stream(self, h: ModelHandle, resident_blocks: int) -> None:
        """(Re)wrap `h` so that its first `resident_blocks` blocks stay on the device and the rest stream."""
        config = StreamConfig(
            self.device,
            h.spec.blocks,
            resident_blocks,
            h.spec.cast_dtype,
            h.spec.files,
            use_stream=self.device.type == "cuda",
            source=h.spec.source,
        )
        h.stream = apply_streaming(h.module, config)

    def shrink(self, h: ModelHandle, nbytes: int) -> None:
        """Partial eviction: give up resident blocks from the end until `nbytes` are freed."""
        assert h.module is not None
        sizes = self._block_bytes[h.key]
        resident = len(sizes) if h.stream is None else sum(b.resident for b in h.stream.blocks)
        count, freed = resident, 0
        while count > 0 and freed < nbytes:
            count -= 1
            freed += sizes[count]
        before, t0 = h.device_bytes, time.perf_counter()
        self._apply_stream(h, count)
        malloc_trim()
        self._sync()
        self._account(h)
        name = f"{h.spec.name} ({resident - count} of {len(sizes)} blocks)"
        self.telemetry.emit(UnloadEvent(name, before - h.device_bytes, time.perf_counter() - t0))

    def _partial_steps(self, h: ModelHandle) -> list[int]:
        if h.module is None or not self.can_stream(h) or h.key not in self._block_bytes:
            return []
        sizes = self._block_bytes[h.key]
        resident = len(sizes) if h.stream is None else sum(b.resident for b in h.stream.blocks)
        return list(accumulate(reversed(sizes[:resident])))

    def make_room(self, need: int, what: str, exclude: ModelHandle | None, policy: Policy) -> None:
        """Ensure `need` bytes are free in the device budget, evicting unlocked models (LRU) if the policy may."""
        # A partial eviction's real effect is re-read from the tensors, so re-plan until it's enough.
        for _ in range(8):
            free = self.ledger.device_free()
            if need <= free:
                return
            others = [h for h in self.ledger.handles.values() if h is not exclude]
            evictable = sum(h.device_bytes for h in others if not h.is_locked)
            if not policy.may_evict:
                raise self._over_budget(what, need, free, policy)
            partial = {h.key: self._partial_steps(h) for h in others}
            plan = plan_eviction(others, need - free, partial)
            if not plan:
                raise self._over_budget(what, need, free + evictable, policy)
            for e in plan:
                victim = self.ledger.handles[e.key]
                if e.partial:
                    self.shrink(victim, e.nbytes)
                else:
                    self.evict(victim)
        if need > self.ledger.device_free():
            raise self._over_budget(what, need, self.ledger.device_free(), policy)
