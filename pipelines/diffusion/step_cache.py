"""Step caches: skip a denoiser's blocks on steps where their output barely changes (issue 33).

Lives here: `STEP_CACHES` (the one list of names the Sampler's `cache` field, the CLI and the GUI offer),
`StepCache` (a method and its threshold), `cache_applies` (whether a denoiser has blocks a cache can hook),
`step_cache` (a context manager that puts diffusers' hooks on the placed denoiser for one sampling run and
takes them off again), `CacheSession.branch` (names each denoiser call of a step, so the positive and the
negative pass keep separate cached residuals) and `cache_bytes` (what the hooks keep, for the memory plan).
May import: stdlib, torch, diffusers (both only inside functions).

Why diffusers' hooks: they are the published implementations (First-Block Cache after ParaAttention,
TaylorSeer), kept in step with each transformer block's signature by `TransformerBlockRegistry`; we only
scope them to one run. The hooks are put on when sampling starts and removed when it ends, so the model the
memory manager keeps resident (and LoRA patches, streaming, the next run) sees no hook.

- `first-block`: the first transformer block always runs; when its residual changed by less than
  `threshold` (mean absolute relative difference) since the last fully computed step, the remaining blocks
  are skipped and their last residual is reused.
- `taylorseer`: features are computed every `interval` steps and predicted by a first-order Taylor
  expansion in between (the first 3 steps always compute, as diffusers' default).
- `easy`: EasyCache (`pipelines.diffusion.easy_cache`, as ComfyUI's EasyCache node): whole denoiser calls
  are served from the last computed (output - input) while the predicted change since then stays below
  `threshold`; it needs no block list, so it also runs on the UNets (SD 1.x, SDXL).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a cache runs: the node declarations read STEP_CACHES cheaply
    import torch

    from pipelines.diffusion.easy_cache import EasyCacheState

log = logging.getLogger(__name__)

# The easy cache's window (ComfyUI's EasyCache defaults): skipping starts after 15% of the steps and stops for
# the last 5%. Here, not in easy_cache, so the ComfyUI importer reads them without importing torch.
EASY_START_FRACTION = 0.15
EASY_END_FRACTION = 0.95

STEP_CACHES: tuple[str, ...] = ("off", "first-block", "taylorseer", "easy")
# The ModuleList names diffusers' cache hooks look for (diffusers.hooks._common); a denoiser without one
# (a UNet: its attention lives inside down/up blocks) has nothing they can skip.
_BLOCK_LISTS = ("transformer_blocks", "single_transformer_blocks", "blocks", "layers")


@dataclass(frozen=True)
class StepCache:
    method: str = "off"
    # first-block: the relative change of the first block's residual below which the rest is reused.
    # taylorseer: steps between full computations (rounded to an integer, at least 2).
    # easy: the summed predicted relative output change below which a whole call is reused (ComfyUI: 0.2).
    threshold: float = 0.1

    def __post_init__(self) -> None:
        if self.method not in STEP_CACHES:
            raise ValueError(f"cache {self.method!r}: choose one of {', '.join(STEP_CACHES)}")
        if self.method != "off" and not self.threshold > 0:
            raise ValueError(f"cache_threshold must be above 0, got {self.threshold}")

    @property
    def on(self) -> bool:
        return self.method != "off"


def cache_applies(model: torch.nn.Module) -> bool:
    """True when the denoiser has a list of transformer blocks for the hooks (the DiT families)."""
    import torch

    return any(isinstance(getattr(model, name, None), torch.nn.ModuleList) for name in _BLOCK_LISTS)


@dataclass
class CacheSession:
    """One sampling run's cache: `branch(name)` wraps each denoiser call; `step(i)` moves to step i."""

    model: torch.nn.Module | None
    steps: int
    easy: EasyCacheState | None = None
    _step: int = 0

    def step(self, index: int) -> None:
        self._step = index
        if self.easy is not None:
            self.easy.step = index

    def branch(self, name: str) -> Any:
        if self.easy is not None:
            self.easy.branch = name
            return nullcontext()
        if self.model is None:
            return nullcontext()
        return _context(self.model, name, self._step, self.steps)

    @property
    def skipped(self) -> int | None:
        """Steps the easy cache served without running the denoiser (None for the other methods)."""
        return None if self.easy is None else self.easy.skipped


@contextmanager
def _context(model: torch.nn.Module, name: str, step: int, steps: int) -> Iterator[None]:
    from diffusers.hooks.hooks import CacheContext, _set_cache_context

    _set_cache_context(model, CacheContext(name, step_index=step, num_inference_steps=steps))
    try:
        yield
    finally:
        _set_cache_context(model, None)


def _config(cache: StepCache) -> Any:
    import torch
    from diffusers.hooks import FirstBlockCacheConfig, TaylorSeerCacheConfig

    if cache.method == "first-block":
        return FirstBlockCacheConfig(threshold=float(cache.threshold))
    # Each block's attention, under every block-list name our families use: diffusers' default patterns
    # (`^transformer_blocks.*attn`, ...) miss Z-Image's `layers.N.attention` and Wan's `blocks.N.attn1`.
    # Attention, not whole blocks: a whole-block prediction fails on SD3's last block, whose text output is
    # None. TaylorSeer's factors default to bfloat16; float32 keeps a float32 run's prediction in its dtype.
    lists = "|".join(_BLOCK_LISTS)
    return TaylorSeerCacheConfig(
        cache_interval=max(2, round(cache.threshold)),
        cache_identifiers=[rf"^({lists})\.\d+\.(attn|attn1|attn2|attention)$"],
        taylor_factors_dtype=torch.float32,
    )


def _apply(model: torch.nn.Module, cache: StepCache) -> None:
    from diffusers.hooks import apply_first_block_cache, apply_taylorseer_cache

    if cache.method == "first-block":
        apply_first_block_cache(model, _config(cache))
    else:
        apply_taylorseer_cache(model, _config(cache))


def _first_block_problem(model: torch.nn.Module) -> str | None:
    """Why diffusers' First-Block Cache cannot hook this model, or None. It reads each block's
    `hidden_states` argument by that name (Z-Image's blocks call it `x`, diffusers 0.42), and it needs a head
    and a tail block."""
    import inspect

    import torch

    blocks = [
        block
        for name in _BLOCK_LISTS
        if isinstance(getattr(model, name, None), torch.nn.ModuleList)
        for block in getattr(model, name)
    ]
    if len(blocks) < 2:
        return f"it needs at least two transformer blocks, {type(model).__name__} has {len(blocks)}"
    if "hidden_states" not in inspect.signature(blocks[0].forward).parameters:
        return f"{type(model).__name__}'s blocks do not take `hidden_states`"
    # SD3's last joint block keeps no text stream (`context_pre_only`) and returns None for it, which the hook
    # subtracts from the cached text output (diffusers 0.42: a TypeError on the first reused step).
    if getattr(blocks[-1], "context_pre_only", False) is True:
        return f"{type(model).__name__}'s last block returns no text stream for the hook's residual"
    return None


def _hook_names(model: torch.nn.Module) -> dict[int, set[str]]:
    from diffusers.hooks import HookRegistry

    names: dict[int, set[str]] = {}
    for module in model.modules():
        registry = getattr(module, "_diffusers_hook", None)
        if isinstance(registry, HookRegistry):
            names[id(module)] = set(registry.hooks)
    return names


def _remove_added(model: torch.nn.Module, before: dict[int, set[str]]) -> None:
    """Take off exactly the hooks `_apply` put on (anything registered before stays)."""
    from diffusers.hooks import HookRegistry

    for module in model.modules():
        registry = getattr(module, "_diffusers_hook", None)
        if not isinstance(registry, HookRegistry):
            continue
        for name in set(registry.hooks) - before.get(id(module), set()):
            registry.remove_hook(name, recurse=False)
        registry.invalidate_child_registries_cache()


@contextmanager
def step_cache(model: torch.nn.Module, cache: StepCache, steps: int) -> Iterator[CacheSession]:
    """Hooks on for the run, off afterwards. A cache on a denoiser without transformer blocks is refused
    (the Sampler names the field) rather than silently doing nothing."""
    if not cache.on:
        yield CacheSession(None, steps)
        return
    if cache.method == "easy":
        with _easy(model, cache, steps) as session:
            yield session
        return
    if not cache_applies(model):
        raise ValueError(
            f"cache {cache.method!r}: this denoiser ({type(model).__name__}) has no transformer block list the "
            "step caches can skip (they apply to the DiT families: Flux, FLUX.2, SD3, Z-Image, Qwen-Image, Wan); "
            "set cache to off"
        )
    problem = _first_block_problem(model) if cache.method == "first-block" else None
    if problem is not None:
        raise ValueError(
            f"cache 'first-block': diffusers' First-Block Cache cannot hook this model ({problem}); use cache taylorseer"
        )
    before = _hook_names(model)
    _apply(model, cache)
    try:
        yield CacheSession(model, steps)
    finally:
        _remove_added(model, before)


_EASY_HOOK = "nodeloom_easy_cache"


@contextmanager
def _easy(model: torch.nn.Module, cache: StepCache, steps: int) -> Iterator[CacheSession]:
    from diffusers.hooks import HookRegistry

    from pipelines.diffusion.easy_cache import EasyCacheState, easy_cache_hook

    state = EasyCacheState(
        threshold=float(cache.threshold), steps=steps, start=EASY_START_FRACTION, end=EASY_END_FRACTION
    )
    registry = HookRegistry.check_if_exists_or_initialize(model)
    registry.register_hook(easy_cache_hook(state), _EASY_HOOK)
    try:
        yield CacheSession(model, steps, easy=state)
    finally:
        registry.remove_hook(_EASY_HOOK, recurse=False)
    # The Sampler node turns this record into its log line and the report's `cache_reused_steps`.
    log.info(
        "easy cache (threshold %g): %d of %d steps reused the last computed step",
        cache.threshold,
        state.skipped,
        steps,
        extra={"cache_reused_steps": state.skipped},
    )


def _hidden(config: dict[str, Any]) -> int:
    hidden = int(config.get("num_attention_heads", 0) or 0) * int(config.get("attention_head_dim", 0) or 0)
    return int(config.get("dim", hidden) or hidden)  # Z-Image names its width `dim`


def _hooked_attentions(config: dict[str, Any]) -> int:
    """Attention modules `_config`'s TaylorSeer pattern matches: one per block, two in Wan's (attn1, attn2)."""
    blocks = int(config.get("num_layers", config.get("n_layers", 0)) or 0)
    blocks += int(config.get("num_single_layers", 0) or 0)  # FLUX.1 / FLUX.2 single-stream blocks
    return 2 * blocks if _is_wan(config) else blocks


def _is_wan(config: dict[str, Any]) -> bool:
    return str(config.get("_class_name", "")).startswith("Wan")


def cache_bytes(
    cache: StepCache, config: dict[str, Any], *, image_tokens: int, text_tokens: int, passes: int, esize: int
) -> int:
    """Bytes a step cache's hooks keep from one denoiser call to the next: working memory for the whole
    sampling run, beside the call's own activations (the memory plan counts it; issue 33).

    `image_tokens`/`text_tokens`: a call's tokens in each stream (batch included); `passes`: the calls of a
    step that keep their own state (positive and negative under separate-pass CFG); `esize`: bytes per value
    at the compute dtype. First-Block Cache keeps, per pass, the first block's output and residual and the
    remaining blocks' residual for the image stream (3 x tokens x hidden) and the text stream's output and
    residual (2 x). TaylorSeer keeps, per pass and per hooked attention, the output and its first difference
    (max_order 1) in float32 (`_config`), for the tokens that attention returns (image + text in joint
    attention; Wan's self- and cross-attention return the video tokens only).
    """
    if not cache.on:
        return 0
    hidden = _hidden(config)
    if cache.method == "first-block":
        return passes * (3 * image_tokens + 2 * text_tokens) * hidden * esize
    if cache.method == "taylorseer":
        returned = image_tokens if _is_wan(config) else image_tokens + text_tokens
        return passes * _hooked_attentions(config) * 2 * returned * hidden * 4
    return 0  # a method whose kept state is not declared here is not counted (the learned peak has it)
