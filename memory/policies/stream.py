"""Streaming: partial residency, the rest of the blocks brought in one at a time around their forward.

May import: stdlib, torch, memory.weights, memory.release, memory.policies.hooks.

`apply_streaming(module, StreamConfig(...))` splits the declared ModuleLists into blocks. The first
`resident_blocks` (in declaration order, which is execution order for UNets, DiTs and decoder stacks) stay
on the device with everything outside the lists; each other block is materialised by a forward pre-hook and
released by a forward post-hook.

- CUDA: streamed blocks live in host memory pinned once, when first streamed, and are copied with
  `non_blocking=True`. With `use_stream`, the pre-hook of block i starts the copy of the next streamed block
  on a side CUDA stream, so that copy overlaps block i's compute; the compute stream waits on an event
  before using it and `record_stream` keeps the allocator from reusing the memory too early. Window: two
  blocks on the device at once.
- CPU: there is no faster tier than RAM, so the weights stay on disk. Each streamed block is read from the
  config's `WeightSource` (memory-mapped, converted per tensor) right before its forward and dropped right
  after; the source closes its file handle after each block, so the mapping goes and RSS falls, and the
  block's file pages are dropped from the page cache (`memory.weights.drop_file_pages`, where the source
  says where its bytes lie): a file larger than RAM streams with its resident pages bounded by a block.
  Window: one block.

The module may arrive built empty (meta tensors, see `memory.weights.WeightSource`): then only the weights
outside the streamed blocks and the resident blocks are ever loaded, one tensor at a time, so a streamed
model is never materialised whole, not even at load. On CUDA the pinned host copies are filled block by
block from the source the same way.

Prefetch follows the execution order observed on earlier calls (declared order until then). Inference only:
weights are swapped under autograd's feet, so don't backpropagate through a streaming module.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from memory.policies.hooks import add_hooks, remove_hooks
from memory.release import malloc_trim
from memory.weights import (
    SafetensorsSource,
    WeightSource,
    block_names,
    drop_file_pages,
    fill_empty,
    named_tensors,
    tensor_bytes,
)

STREAM_HOOK = "nodeloom_stream"
_STATE_ATTR = "_nodeloom_stream_state"


@dataclass(frozen=True)
class StreamConfig:
    device: torch.device
    blocks: tuple[str, ...]
    resident_blocks: int = 0
    dtype: torch.dtype | None = torch.float32  # None: blocks move in their stored (quantized) dtypes
    files: tuple[Path, ...] = ()  # safetensors files whose keys are the module's names (when no `source`)
    use_stream: bool = True  # CUDA only: prefetch the next block on a side stream
    # Where weights come from (required on CPU, and for a module built empty); default: `files`.
    source: WeightSource | None = None


class _Slot:
    """One parameter or persistent buffer inside a block."""

    __slots__ = ("owner", "attr", "is_param", "name", "shape", "dtype", "host")

    def __init__(
        self,
        owner: torch.nn.Module,
        attr: str,
        is_param: bool,
        name: str,
        t: torch.Tensor,
        dtype: torch.dtype | None,
    ) -> None:
        self.owner, self.attr, self.is_param, self.name = owner, attr, is_param, name
        # Floating weights run at the configured dtype; integer buffers (and quantized storage) keep theirs.
        cast = dtype is not None and t.is_floating_point()
        self.shape, self.dtype = tuple(t.shape), (dtype if cast else t.dtype)
        self.host: torch.Tensor | None = None  # pinned copy (CUDA)

    def current(self) -> torch.Tensor:
        return self.owner._parameters[self.attr] if self.is_param else self.owner._buffers[self.attr]

    def assign(self, t: torch.Tensor) -> None:
        if self.is_param:
            param = self.owner._parameters[self.attr]
            if (
                param.is_meta != t.is_meta
            ):  # `.data =` can't swap meta and real storage: replace the Parameter
                self.owner._parameters[self.attr] = torch.nn.Parameter(t, requires_grad=param.requires_grad)
            else:
                param.data = t
        else:
            self.owner._buffers[self.attr] = t


class _Block:
    __slots__ = ("name", "module", "slots", "nbytes", "resident", "live", "pending", "tensors")

    def __init__(self, name: str, module: torch.nn.Module, slots: list[_Slot], nbytes: int) -> None:
        self.name, self.module, self.slots, self.nbytes = name, module, slots, nbytes
        self.resident = True
        self.live = True
        self.pending: Any = None  # torch.cuda.Event of an in-flight prefetch
        self.tensors: list[torch.Tensor] = []


class StreamState:
    """Per-module streaming bookkeeping plus transfer statistics (bytes, seconds) since the last take."""

    def __init__(self, module: torch.nn.Module, config: StreamConfig) -> None:
        self.module = module
        self.config = config
        self.built_empty = False  # set by apply_streaming: weights came from `source` into meta tensors
        self.source: WeightSource | None = config.source or (
            SafetensorsSource(config.files) if config.files else None
        )
        self.blocks: list[_Block] = []
        self.cuda = config.device.type == "cuda"
        self._side = torch.cuda.Stream(config.device) if (self.cuda and config.use_stream) else None
        self._timings: list[tuple[Any, Any, int]] = []  # CUDA: (start event, end event, bytes)
        self._cpu_bytes = 0
        self._cpu_seconds = 0.0
        self.copies_on_side_stream = 0
        self._next: dict[str, _Block] = {}  # observed execution order between streamed blocks
        self._last: _Block | None = None
        self._ranges: dict[str, list[tuple[Path, int, int]]] = {}  # block -> its bytes in the files (CPU)

    # -- sizes ------------------------------------------------------------------------------------------

    def streamed(self) -> list[_Block]:
        return [b for b in self.blocks if not b.resident]

    def window_bytes(self) -> int:
        """Extra device bytes while running: the streamed block in use, plus the one being prefetched."""
        biggest = max((b.nbytes for b in self.streamed()), default=0)
        return biggest * (2 if self._side is not None else 1)

    def pinned_bytes(self) -> int:
        return sum(tensor_bytes(s.host) for b in self.blocks for s in b.slots if s.host is not None)

    def take_transfer_stats(self) -> tuple[int, float]:
        """(bytes, seconds) copied in since the last call. Synchronises CUDA to read the event timers."""
        if self.cuda:
            if self._timings:
                torch.cuda.synchronize(self.config.device)
            nbytes = sum(n for _, _, n in self._timings)
            seconds = sum(s.elapsed_time(e) for s, e, _ in self._timings) / 1000.0
            self._timings.clear()
            return nbytes, seconds
        out = (self._cpu_bytes, self._cpu_seconds)
        self._cpu_bytes, self._cpu_seconds = 0, 0.0
        return out

    # -- moving one block ---------------------------------------------------------------------------------

    def _placeholder(self, slot: _Slot) -> torch.Tensor:
        # Keeps dtype and device so `module.dtype` / `module.device` still answer correctly between calls.
        return torch.empty(0, dtype=slot.dtype, device=self.config.device)

    def _release(self, block: _Block) -> None:
        for s in block.slots:
            s.assign(self._placeholder(s))
        block.tensors = []
        block.pending = None
        block.live = False

    def _to_host(self, block: _Block) -> None:
        """Make sure a block has its streaming source: a pinned copy (CUDA) or a file mapping (CPU)."""
        if not self.cuda:
            return
        if any(s.host is None and s.current().is_meta for s in block.slots):
            # Built empty: fill the pinned copies from the source, one tensor at a time.
            for s, t in zip(block.slots, self._read(block), strict=True):
                if s.host is None:
                    s.host = torch.empty(s.shape, dtype=s.dtype, pin_memory=True)
                    s.host.copy_(t)
            return
        for s in block.slots:
            if s.host is None:
                t = s.current()
                if t.device.type == "cpu" and _pinned(t) and t.dtype == s.dtype:
                    s.host = t
                else:
                    s.host = torch.empty(s.shape, dtype=s.dtype, pin_memory=True)
                    s.host.copy_(t)

    def _materialise(self, block: _Block, prefetch: bool) -> None:
        if self.cuda:
            device = self.config.device
            side = prefetch and self._side is not None
            stream = self._side if side else torch.cuda.current_stream(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                start.record(stream)
                tensors = [s.host.to(device, non_blocking=True) for s in block.slots]
                end.record(stream)
            self._timings.append((start, end, block.nbytes))
            if side:
                block.pending = end
                self.copies_on_side_stream += 1
        else:
            t0 = time.perf_counter()
            tensors = self._read(block)
            self._cpu_seconds += time.perf_counter() - t0
            self._cpu_bytes += block.nbytes
        for s, t in zip(block.slots, tensors, strict=True):
            s.assign(t)
        block.tensors = tensors
        block.live = True

    def _read(self, block: _Block) -> list[torch.Tensor]:
        """The block's weights from the source, in slot order, converted to the run dtype."""
        assert self.source is not None
        loaded = dict(self.source.load([s.name for s in block.slots], self.config.dtype))
        out = []
        for s in block.slots:
            t = loaded.pop(s.name)
            if t.dtype != s.dtype:
                t = t.to(s.dtype)
            if tuple(t.shape) != s.shape:
                raise ValueError(f"{s.name}: source has shape {tuple(t.shape)}, module wants {s.shape}")
            out.append(t)
        return out

    # -- hooks ------------------------------------------------------------------------------------------

    def _next_streamed(self, block: _Block) -> _Block | None:
        """The streamed block expected to run after `block`: as observed on earlier calls, else declared order.

        Declared order is only a first guess (a CrossAttnDownBlock2D declared as `resnets` then `attentions`
        runs them interleaved), so every observed transition overrides it, the way diffusers' group
        offloading records the execution order on its first pass.
        """
        learned = self._next.get(block.name)
        if learned is not None and not learned.resident:
            return learned
        streamed = self.streamed()
        if len(streamed) < 2 or block not in streamed:
            return None
        i = streamed.index(block)
        return streamed[(i + 1) % len(streamed)]

    def pre_forward(self, block: _Block) -> None:
        if block.resident:
            return
        if self._last is not None and self._last is not block:
            self._next[self._last.name] = block
        self._last = block
        if not block.live:
            self._materialise(block, prefetch=False)
        self._settle(block)
        if self._side is not None:
            nxt = self._next_streamed(block)
            if nxt is not None and not nxt.live:
                self._materialise(nxt, prefetch=True)

    def _settle(self, block: _Block) -> None:
        """Order a prefetched block's copy before its use on the compute stream."""
        if block.pending is None:
            return
        current = torch.cuda.current_stream(self.config.device)
        current.wait_event(block.pending)
        for t in block.tensors:
            # Allocated on the side stream, used on this one: keep the allocator from reusing it too early.
            t.record_stream(current)
        block.pending = None

    def post_forward(self, block: _Block) -> None:
        if not block.resident:
            self._release(block)
            if not self.cuda:
                # glibc keeps freed blocks of this size in its heap once its mmap threshold has adapted to
                # them, so RSS would keep the last block's bytes on top of the next one.
                malloc_trim()
                self._drop_pages(block)

    def _drop_pages(self, block: _Block) -> None:
        """Streamed blocks' file pages out of the page cache (CPU): read again next step, never kept.

        All streamed blocks but the next one, not only the block that ran: a fault on a mapping reads ahead
        (megabytes past the page asked for), so later blocks' pages arrive early and would otherwise pile up;
        the next block's are kept, they are what the read-ahead was for."""
        ranges = getattr(self.source, "file_ranges", None)
        if ranges is None:
            return
        if block.name not in self._ranges:
            self._ranges.update({b.name: ranges([s.name for s in b.slots]) for b in self.streamed()})
        nxt = self._next_streamed(block)
        drop_file_pages(r for b in self.streamed() if b is not nxt for r in self._ranges.get(b.name, ()))

    def release_idle(self) -> None:
        """Drop streamed blocks left on the device (a prefetch for a call that won't come, e.g. at `use` exit)."""
        for block in self.streamed():
            if block.live:
                self._release(block)

    # -- residency --------------------------------------------------------------------------------------

    def set_resident(self, count: int) -> None:
        """Keep the first `count` blocks resident and stream the others."""
        for i, block in enumerate(self.blocks):
            want = i < count
            if want and not block.resident:
                if not block.live:
                    self._materialise(block, prefetch=False)
                self._settle(block)
                block.tensors = []
                block.resident = True
            elif not want and block.resident:
                self._to_host(block)
                self._release(block)
                block.resident = False

    def restore(self) -> None:
        """Put every block's weights back as plain tensors: pinned host copies (CUDA) or file maps (CPU).

        A module built empty gets meta tensors back on CPU instead: reading (and converting) every streamed
        block only for the module to be stripped or refilled would materialise it whole, which is what
        streaming exists to avoid. Whoever keeps it fills the meta tensors from the source again.
        """
        for block in self.blocks:
            if block.resident or block.live:
                continue
            if self.cuda:
                for s in block.slots:
                    s.assign(s.host)
            elif self.built_empty:
                for s in block.slots:
                    s.assign(torch.empty(s.shape, dtype=s.dtype, device="meta"))
            else:
                for s, t in zip(block.slots, self._read(block), strict=True):
                    s.assign(t)
            block.live = True


def _pinned(t: torch.Tensor) -> bool:
    try:
        return t.is_pinned()
    except RuntimeError:  # CPU-only builds may have no pinned-memory backend to ask
        return False


def _collect_slots(block_name: str, block: torch.nn.Module, dtype: torch.dtype | None) -> list[_Slot]:
    slots = []
    for sub_name, sub in block.named_modules():
        prefix = f"{block_name}.{sub_name}" if sub_name else block_name
        for attr, p in sub._parameters.items():
            if p is not None:
                slots.append(_Slot(sub, attr, True, f"{prefix}.{attr}", p, dtype))
        for attr, b in sub._buffers.items():
            # Non-persistent buffers (rotary tables, position ids) are not in the files: they stay resident.
            if b is not None and attr not in sub._non_persistent_buffers_set:
                slots.append(_Slot(sub, attr, False, f"{prefix}.{attr}", b, dtype))
    return slots


def apply_streaming(module: torch.nn.Module, config: StreamConfig) -> StreamState:
    """Stream `module`'s blocks per `config`. Applying again on a streaming module only changes residency."""
    state: StreamState | None = module.__dict__.get(_STATE_ATTR)
    if state is not None:
        state.set_resident(config.resident_blocks)
        return state
    if config.device.type not in ("cuda", "cpu"):
        raise NotImplementedError(f"streaming on {config.device.type} is not implemented")
    state = StreamState(module, config)
    names = block_names(module, config.blocks)
    for name in names:
        block = module.get_submodule(name)
        slots = _collect_slots(name, block, config.dtype)
        state.blocks.append(
            _Block(name, block, slots, sum(tensor_bytes(s.current(), config.dtype) for s in slots))
        )
    empty = any(t.is_meta for _, t in named_tensors(module))
    if state.source is None and (empty or not state.cuda):
        raise ValueError(
            "streaming on CPU (or an empty module) reads blocks from a weight source; none given"
        )
    state.set_resident(config.resident_blocks)
    if empty:
        # Everything outside the streamed blocks, tensor by tensor; the streamed blocks hold placeholders.
        fill_empty(module, state.source, config.dtype)
        state.built_empty = True
    # Non-block weights and resident blocks; streamed blocks hold empty placeholders, so this moves none of them.
    if config.dtype is not None and any(
        t.is_floating_point() and t.dtype != config.dtype for _, t in named_tensors(module)
    ):
        module.to(dtype=config.dtype)  # only when needed: diffusers warns on every `.to(dtype)`
    module.to(config.device)
    for block in state.blocks:
        add_hooks(
            block.module,
            STREAM_HOOK,
            pre=lambda _m, _a, b=block: state.pre_forward(b),
            post=lambda _m, _a, _o, b=block: state.post_forward(b),
        )
    module.__dict__[_STATE_ATTR] = state
    return state


def remove_streaming(module: torch.nn.Module) -> None:
    """Remove the hooks and put every weight back in place (device, pinned host or file map)."""
    state: StreamState | None = module.__dict__.pop(_STATE_ATTR, None)
    if state is None:
        return
    for block in state.blocks:
        remove_hooks(block.module, STREAM_HOOK)
    state.restore()
