"""LLM nodes: load a language model (GGUF or transformers folder) and generate text with it.

Lives here: the `NODES` tuple (`LoadLLM`, `LLMGenerate`). Imports `nodes.spec`, `nodes.types`,
`nodes.context`, `pipelines.paths` and `pipelines.llm.runtime` (inside the run functions: it imports torch
and transformers, which listing node types must not pay for); the model code lives in pipelines/.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memory.errors import fmt_bytes
from nodes.context import NodeContext
from nodes.spec import Input, NodeSpec, Output, Param
from nodes.types import LLM, TEXT
from pipelines.paths import resolve_model_path
from pipelines.text_limits import check_llm_prompt

if TYPE_CHECKING:
    from pipelines.llm.runtime import LLMModel

SEED_MAX = 2**63 - 1


KEEP_QUANTIZED = ("auto", "on", "off")


# What a session's first Load LLM imports (seconds on a slow machine): said on the node while it happens.
LLM_IMPORTS = ("transformers", "transformers.modeling_utils", "transformers.generation")


def _run_load_llm(ctx: NodeContext, path: str, keep_quantized: str = "auto") -> dict[str, Any]:
    ctx.importing(*LLM_IMPORTS)
    from pipelines.llm.runtime import open_llm

    resolved = resolve_model_path(path)
    keep = keep_quantized == "on" or (keep_quantized == "auto" and ctx.device.type != "cpu")
    with ctx.interruptible():  # a first GGUF conversion has no steps: Ctrl+C stops it at once
        llm = open_llm(
            ctx.memory,
            resolved,
            allow_pickle=ctx.allow_pickle,
            keep_quantized=keep,
            on_convert=ctx.progress_callback("convert"),
        )
    if llm.files.from_gguf and llm.handle.spec.storage:
        ctx.log(f"{resolved.name}: weights kept quantized ({fmt_bytes(llm.handle.weight_bytes)})")
    elif llm.files.from_gguf:
        ctx.log(f"{resolved.name}: using the converted copy in {llm.files.folder}")
    return {"llm": llm}


def _run_generate(
    ctx: NodeContext,
    llm: LLMModel,
    prompt: str,
    system_prompt: str,
    chat: bool,
    sampling: str,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    repetition_penalty: float,
    seed: int,
    stop: str,
    context_tokens: int,
    kv_cache: str,
) -> dict[str, Any]:
    from pipelines.llm.chat import parse_stop_strings
    from pipelines.llm.runtime import GenerationRequest, generate_text
    from pipelines.llm.sampling import SamplingParams

    if not prompt.strip():
        raise ValueError("field 'prompt': the prompt is empty")
    check_llm_prompt(prompt + system_prompt, llm.context_length, llm.name)
    params = (
        SamplingParams(repetition_penalty=repetition_penalty)
        if sampling == "greedy"
        else SamplingParams(
            temperature=max(temperature, 1e-5),
            top_k=top_k,
            top_p=top_p,
            repetition_penalty=repetition_penalty,
        )
    )
    request = GenerationRequest(
        prompt=prompt,
        system_prompt=system_prompt,
        chat=chat,
        max_new_tokens=max_new_tokens,
        sampling=params,
        seed=seed,
        stop_strings=parse_stop_strings(stop),
        context_tokens=context_tokens,
        kv_cache=kv_cache,
    )
    out = generate_text(
        ctx.memory,
        llm,
        request,
        on_text=ctx.text,
        on_step=lambda step: ctx.progress(step.step, step.total, kind="decode_token"),
    )
    for name, value in out.metrics.items():
        ctx.metric(name, value)
    ctx.log(
        f"{len(out.result.tokens)} tokens ({out.result.stop_reason}); first after {out.result.ttft_s:.2f} s, "
        f"then {out.result.decode_tokens_per_s:.1f} tokens/s"
    )
    return {"text": out.text.strip()}


NODES: tuple[NodeSpec, ...] = (
    NodeSpec(
        type="LoadLLM",
        title="Load LLM",
        category="llm",
        run=_run_load_llm,
        params=[
            Param(
                "path",
                "path",
                default="builtin:smollm2",
                file_filter="LLM (*.gguf)",
                help="A .gguf file, a transformers model folder (safetensors), or builtin:smollm2. "
                "A GGUF is converted once and cached, so later loads take a few seconds.",
            ),
            Param(
                "keep_quantized",
                "choice",
                default="auto",
                choices=KEEP_QUANTIZED,
                help="GGUF only. on: keep the file's quantization in memory (~5x less RAM than float32), each "
                "layer dequantized as it runs; off: run the float32 copy; auto: on with a GPU, off on a CPU "
                "(with no quantized matmul kernel there, dequantizing every token made decoding ~16x slower)",
            ),
        ],
        outputs=[Output("llm", LLM)],
        description="A language model, loaded by the memory manager only while a node uses it.",
    ),
    NodeSpec(
        type="LLMGenerate",
        title="LLM Generate",
        category="llm",
        run=_run_generate,
        inputs=[Input("llm", LLM)],
        params=[
            Param(
                "prompt",
                "text",
                default="What is the capital of France? Answer in one sentence.",
                help="What to ask (the user turn in chat mode).",
            ),
            Param(
                "system_prompt",
                "text",
                default="",
                help="Chat mode: the system message; empty uses the model's default.",
            ),
            Param("chat", "bool", default=True, help="Wrap the prompt in the model's chat template."),
            Param(
                "sampling",
                "choice",
                default="greedy",
                choices=("greedy", "sample"),
                help="greedy: always the most likely token (reproducible); sample: draw with the settings below.",
            ),
            Param("max_new_tokens", "int", default=128, min=1, max=32768),
            Param(
                "temperature",
                "float",
                default=0.7,
                min=0.0,
                max=5.0,
                step=0.05,
                help="sample: lower is more focused, higher more varied.",
            ),
            Param(
                "top_k", "int", default=0, min=0, max=100000, help="sample: keep the k best tokens (0 = all)."
            ),
            Param(
                "top_p",
                "float",
                default=1.0,
                min=0.01,
                max=1.0,
                step=0.01,
                help="sample: keep the smallest set of tokens whose probability reaches p (1 = all).",
            ),
            Param(
                "repetition_penalty",
                "float",
                default=1.0,
                min=0.5,
                max=3.0,
                step=0.05,
                help="Above 1 discourages repeating tokens already in the prompt or output.",
            ),
            Param(
                "seed",
                "seed",
                default=0,
                min=0,
                max=SEED_MAX,
                help="sample: the same seed gives the same text.",
            ),
            Param(
                "stop",
                "string",
                default="",
                help="Stop strings, separated by | (write \\n for a newline); not included in the output.",
            ),
            Param(
                "context_tokens",
                "int",
                default=0,
                min=0,
                max=1_048_576,
                help="KV cache to budget, in tokens; 0 = prompt + max_new_tokens.",
            ),
            Param(
                "kv_cache",
                "choice",
                default="dynamic",
                choices=("dynamic", "static"),
                help="dynamic grows per token; static allocates the whole context up front.",
            ),
        ],
        outputs=[Output("text", TEXT)],
        description="Generate text, streaming each token; reports time to first token and tokens/s.",
    ),
)
