"""The LLM as the memory manager sees it: a registered component plus what the loop needs around it.

Lives here: `LLMModel` (the value an LLM wire carries), `open_llm`, `GenerationRequest`,
`generate_text`, `TextGeneration`, `LLM_CUDA_DTYPE`. Imports `memory`, `pipelines.dtypes` and `pipelines.llm.*`;
never nodes/, app/ or Qt.

Weights are only ever touched through `memory.use(handle)`, so the manager decides when they are
loaded and unloaded (sequential: right before and right after the generation). The KV cache is
budgeted before the run with `kv_cache_bytes` through `memory.reserve_working`; if the asked context
does not fit, `BudgetExceeded` says how much it needs and how much there is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from memory import ComponentSpec, MemoryManager, ModelHandle, fmt_bytes
from pipelines.dtypes import dtype_for_device
from pipelines.llm.chat import build_prompt_ids
from pipelines.llm.compact_model import UnsupportedPackedError
from pipelines.llm.detokenize import TextStream
from pipelines.llm.generate import GenerationResult, generate
from pipelines.llm.gguf_plan import quantized_mode
from pipelines.llm.hf_loader import (
    LLMFiles,
    build_causal_lm,
    end_of_turn_ids,
    load_config,
    load_tokenizer,
    prepare_llm_files,
)
from pipelines.llm.kv_cache import KVCache, kv_geometry
from pipelines.llm.sampling import SamplingParams
from pipelines.load_progress import OnProgress
from pipelines.model_keys import component_keys
from pipelines.paths import check_weights_format
from pipelines.steps import OnStep, Step

# The half type the LLM runs in on CUDA: what Llama-style checkpoints (SmolLM2 included) are published in, and
# with float32's range (float16 can overflow their activations). On the CPU it runs float32 (pipelines.dtypes).
LLM_CUDA_DTYPE = torch.bfloat16


@dataclass(frozen=True, eq=False)
class LLMModel:
    """A lazy LLM: files on disk, a ledger handle, the tokenizer. No weights until `memory.use`."""

    files: LLMFiles
    handle: ModelHandle
    tokenizer: PreTrainedTokenizerBase
    config: PretrainedConfig
    eos_ids: tuple[int, ...]
    dtype: torch.dtype  # what the weights and the KV cache compute in on the manager's device
    image_processor: Any = None  # a vision model's (pipelines.llm.vision); None: text only
    vision_config: PretrainedConfig | None = None  # the whole VL config (`config` is its text part)
    # Puts a causal-LM face on the module `memory.use` yields, per use (a ComfyUI text-encoder file's entry is
    # the diffusion text encoder's module: pipelines.llm.comfy_te); None: the module is the LM.
    wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None

    @property
    def takes_images(self) -> bool:
        return self.image_processor is not None

    @property
    def name(self) -> str:
        return self.files.source.name

    @property
    def context_length(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 0) or 0)

    def kv_bytes(self, tokens: int) -> int:
        return kv_geometry(self.config).bytes_for(tokens, self.dtype)


def open_llm(
    memory: MemoryManager,
    path: Path,
    *,
    allow_pickle: bool = False,
    keep_quantized: bool | str = False,
    on_convert: OnProgress | None = None,
) -> LLMModel:
    """Prepare `path` (GGUF converted or repacked once and cached) and register its weights with `memory`.

    `on_convert(stage, done, total)` follows a first GGUF conversion (it may raise to cancel); the bytes read
    whenever the manager loads the model are its `LoadProgress` (`MemoryManager.load_progress`).

    `keep_quantized` (GGUF only; ignored for other files): True/"on" keeps the file's quantization in memory:
    on a CPU repacked for torch's int4/int8 matmuls and run by the compact decoder (pipelines.llm.packed_*),
    elsewhere as the file's blocks dequantized per layer (pipelines.llm.gguf_quantized); the ledger counts
    the bytes held. False/"off": the float32 copy. "auto": `quantized_mode` decides (`pipelines.llm.gguf_plan`).
    "packed" and
    "blocks" name one of the two quantized forms explicitly (packed falls back to blocks off the CPU).

    A first-time GGUF conversion holds every tensor in float32 for a moment: that is budgeted as
    working memory for the duration, so it cannot silently push the process past the budget.
    """
    from pipelines.llm.comfy_te import comfy_te_kind, open_comfy_te_llm

    if Path(path).is_file() and check_weights_format(Path(path), allow_pickle=allow_pickle) == "safetensors":
        if (kind := comfy_te_kind(Path(path))) is not None:  # ComfyUI's text_encoders/ single files
            return LLMModel(**open_comfy_te_llm(memory, Path(path), kind))
    mode = quantized_mode(memory.device, keep_quantized)
    if (
        mode == "packed"
        and Path(path).is_file()
        and check_weights_format(Path(path), allow_pickle=allow_pickle) == "gguf"
    ):
        from pipelines.llm.packed_runtime import open_packed_llm

        try:
            files, handle, config = open_packed_llm(memory, Path(path), on_convert)
        except UnsupportedPackedError as exc:  # e.g. rope scaling the compact decoder lacks
            if keep_quantized != "auto":
                raise ValueError(f"{Path(path).name}: {exc}; keep_quantized off runs it in float32") from exc
            mode = "float"
        else:
            tokenizer, eos = load_tokenizer(files), end_of_turn_ids(files, config)
            return LLMModel(files, handle, tokenizer, config, eos, torch.float32)
    keep_quantized = mode == "blocks"
    what = f"converting {Path(path).name} to float32"
    reserved: list[int] = []

    def reserve(nbytes: int) -> None:
        memory.reserve_working(nbytes, what)
        reserved.append(nbytes)

    try:
        files = prepare_llm_files(path, allow_pickle=allow_pickle, on_plan=reserve, on_progress=on_convert)
    finally:
        if reserved:
            memory.release_working(what)
    config = load_config(files)
    dtype = dtype_for_device("auto", memory.device, LLM_CUDA_DTYPE)
    from pipelines.llm.vision import is_vision_config

    if is_vision_config(config):
        return _open_vision_llm(memory, files, config, dtype)
    if keep_quantized and files.from_gguf:
        from pipelines.llm.gguf_quantized import register_quantized_llm

        handle = register_quantized_llm(memory, files.source, config, dtype)
        return LLMModel(files, handle, load_tokenizer(files), config, end_of_turn_ids(files, config), dtype)
    spec = ComponentSpec(
        **component_keys(files.source.resolve(), "llm", files=files.weight_files).spec_fields(),
        name="llm",
        kind="llm",
        build=lambda: build_causal_lm(files, dtype, memory.load_progress),  # reads its own weights
        files=files.weight_files if not files.uses_pickle else (),
        dtype=dtype,
        blocks=("model.layers",),
    )
    handle = memory.register(spec)
    return LLMModel(files, handle, load_tokenizer(files), config, end_of_turn_ids(files, config), dtype)


def _open_vision_llm(
    memory: MemoryManager, files: LLMFiles, config: PretrainedConfig, dtype: torch.dtype
) -> LLMModel:
    """A Qwen-VL folder: the image-text-to-text model (text and vision tower) registered as one component."""
    from pipelines.llm.vision import build_vision_lm, load_image_processor

    spec = ComponentSpec(
        **component_keys(files.source.resolve(), "llm-vision", files=files.weight_files).spec_fields(),
        name="llm",
        kind="llm",
        build=lambda: build_vision_lm(files, dtype, memory.load_progress),
        files=files.weight_files,
        dtype=dtype,
        blocks=("model.language_model.layers", "model.visual.blocks"),
    )
    text = config.get_text_config()
    return LLMModel(
        files,
        memory.register(spec),
        load_tokenizer(files),
        text,
        end_of_turn_ids(files, text),
        dtype,
        image_processor=load_image_processor(files.folder),
        vision_config=config,
    )


@dataclass(frozen=True)
class GenerationRequest:
    prompt: str
    system_prompt: str = ""
    chat: bool = True
    max_new_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    stop_strings: tuple[str, ...] = ()
    context_tokens: int = 0  # KV cache size to budget; 0 = prompt + max_new_tokens
    kv_cache: str = "dynamic"


@dataclass
class TextGeneration:
    text: str
    result: GenerationResult
    kv_reserved_bytes: int
    kv_bytes: int  # what the cache tensors held at the end

    @property
    def metrics(self) -> dict[str, float]:
        r = self.result
        return {
            "ttft_s": r.ttft_s,
            "prefill_tokens_per_s": r.prefill_tokens_per_s,
            "decode_tokens_per_s": r.decode_tokens_per_s,
            "kv_bytes": float(self.kv_reserved_bytes),
            "kv_bytes_used": float(self.kv_bytes),
            "tokens": float(len(r.tokens)),
            "prompt_tokens": float(r.prompt_tokens),
        }


# on_text(delta); on_step(Step(index_1_based, total)) -- both may raise to cancel.
OnText = Callable[[str], None]


def _context_size(llm: LLMModel, request: GenerationRequest, prompt_tokens: int) -> int:
    needed = prompt_tokens + request.max_new_tokens - 1
    size = request.context_tokens or needed
    if needed > size:
        raise ValueError(
            f"the prompt ({prompt_tokens} tokens) plus max_new_tokens={request.max_new_tokens} needs a context "
            f"of {needed} tokens, more than context_tokens={size}"
        )
    if llm.context_length and size > llm.context_length:
        raise ValueError(f"a context of {size} tokens exceeds {llm.name}'s maximum of {llm.context_length}")
    return size


def generate_text(
    memory: MemoryManager,
    llm: LLMModel,
    request: GenerationRequest,
    *,
    on_text: OnText | None = None,
    on_step: OnStep | None = None,
    images: Sequence[Any] = (),
) -> TextGeneration:
    """Budget the KV cache, take the weights from the manager, run prefill + decode, stream text.

    `images` (PIL pictures) go into the prompt of a vision model (`llm.takes_images`), before the text."""
    vision = None
    if images:
        from pipelines.llm.vision import vision_inputs

        if not llm.takes_images or llm.vision_config is None:
            raise ValueError(f"{llm.name} takes no pictures (a Qwen2.5-VL / Qwen3-VL model folder does)")
        vision = vision_inputs(
            llm.tokenizer,
            llm.image_processor,
            int(llm.vision_config.image_token_id),
            request.prompt,
            images,
            system_prompt=request.system_prompt,
            chat=request.chat,
        )
        prompt_ids = vision.ids
    else:
        prompt_ids = build_prompt_ids(
            llm.tokenizer, request.prompt, system_prompt=request.system_prompt, chat=request.chat
        )
    context = _context_size(llm, request, len(prompt_ids))
    kv_reserved = llm.kv_bytes(context)
    reserved, what = kv_reserved, f"KV cache of {llm.name} for {context} tokens ({fmt_bytes(kv_reserved)})"
    fits = f"{llm.name}: a KV cache for {context} tokens ({fmt_bytes(kv_reserved)})"
    if vision is not None:  # the vision tower's activations come and go during the prefill
        from pipelines.llm.vision import vision_working_bytes_for

        tower = vision_working_bytes_for(llm.vision_config, vision, llm.dtype)
        reserved += tower
        tower_what = f" and its vision tower over {vision.pixel_values.shape[0]} patches ({fmt_bytes(tower)})"
        what, fits = what + tower_what, fits + tower_what
    # Fail before loading anything when weights + KV cache can never fit (the manager knows the policy).
    memory.check_fits(fits, reserved, llm.handle)
    memory.reserve_working(reserved, what)
    stream = TextStream(llm.tokenizer, request.stop_strings)

    def on_token(token_id: int, index: int) -> bool:
        if token_id not in llm.eos_ids:
            delta = stream.push(token_id)
            if delta and on_text is not None:
                on_text(delta)
        if on_step is not None:
            on_step(Step(index + 1, request.max_new_tokens))
        return stream.stopped

    try:
        with memory.use(llm.handle) as model:
            if llm.wrap is not None:
                model = llm.wrap(model)
            if vision is not None:
                from pipelines.llm.vision import VisionPrompt

                model = VisionPrompt(model, vision, llm.config)
            cache = KVCache(llm.config, context, kind=request.kv_cache, dtype=llm.dtype, model=model)
            result = generate(
                model,
                prompt_ids,
                cache,
                max_new_tokens=request.max_new_tokens,
                params=request.sampling,
                eos_ids=llm.eos_ids,
                seed=request.seed,
                on_token=on_token,
                device=memory.device,
            )
            kv_used = cache.nbytes
            del cache, model
    finally:
        memory.release_working(what)
    tail = stream.finish()
    if tail and on_text is not None:
        on_text(tail)
    if result.stop_reason == "eos" and on_step is not None:
        on_step(Step(len(result.tokens), len(result.tokens)))
    return TextGeneration(stream.text, result, kv_reserved, kv_used)
