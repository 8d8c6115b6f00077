"""LLM nodes: load a language model (GGUF, transformers folder, ComfyUI text-encoder file) and generate text with it.

Lives here: the node types `LoadLLM`, `LLMGenerate` and the `NODES` tuple of their specs. Imports `nodes.declare`,
`nodes.kinds`, `nodes.spec`, `nodes.types` (as `types`: its TEXT is a wire type, nodes.kinds' a parameter kind),
`nodes.context`, `pipelines.paths` and `pipelines.llm.gguf_plan` / `pipelines.llm.runtime` /
`pipelines.llm.vision` (inside the run functions: they import torch and transformers, which listing node types
must not pay for); the model code lives in pipelines/. LLM Generate's optional `image` input feeds a vision
model (Qwen2.5-VL, Qwen3-VL) its pictures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memory.errors import fmt_bytes
from nodes import types
from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, settings_from, wire
from nodes.kinds import BOOL, CHOICE, FLOAT, INT, PATH, SEED, STRING, TEXT
from nodes.spec import NodeSpec, Output
from pipelines.paths import resolve_model_path
from pipelines.text_limits import check_llm_prompt

if TYPE_CHECKING:
    from pipelines.llm.runtime import LLMModel

SEED_MAX = 2**63 - 1


KEEP_QUANTIZED = ("auto", "on", "off")


# What a session's first Load LLM imports (seconds on a slow machine): said on the node while it happens.
LLM_IMPORTS = ("transformers", "transformers.modeling_utils", "transformers.generation")


@node_type(
    "LoadLLM",
    title="Load LLM",
    category="llm",
    outputs=[Output("llm", types.LLM)],
    description="A language model, loaded by the memory manager only while a node uses it.",
)
class LoadLLM(Node):
    path: str = param(
        PATH,
        "builtin:smollm2",
        file_filter="LLM (*.gguf *.safetensors)",
        help="A .gguf file, a transformers model folder (safetensors), ComfyUI's text-encoder file of a Qwen3 / "
        "Qwen-VL / Mistral / Gemma 3 LLM (models/text_encoders/, shared with a Load Text Encoder of it), or "
        "builtin:smollm2. "
        "A GGUF is converted once and cached, so later loads take a few seconds.",
    )
    keep_quantized: str = param(
        CHOICE,
        "auto",
        choices=KEEP_QUANTIZED,
        help="GGUF only. on: keep the file's quantization in memory (~5x less RAM than float32); on a CPU "
        "repacked once for torch's int4/int8 matmuls (decoding ~2.5x faster than float32 here), on a GPU "
        "dequantized layer by layer; off: run the float32 copy; auto: on when a quick measurement on this "
        "machine shows the packed kernels faster (remembered per machine), else off on a CPU; on with a GPU",
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        ctx.importing(*LLM_IMPORTS)
        from pipelines.llm.gguf_plan import first_repack_reserved

        resolved = resolve_model_path(self.path)
        # A first repack's working memory is reserved from the file's header before the runtime's imports
        # (transformers) and the metadata parse: a plan stops at that reservation, the run's repack then
        # reserves what it measures instead. A first GGUF conversion has no steps: Ctrl+C stops it at once.
        with ctx.interruptible(), first_repack_reserved(ctx.memory, resolved, self.keep_quantized):
            from pipelines.llm.runtime import open_llm

            llm = open_llm(
                ctx.memory,
                resolved,
                allow_pickle=ctx.allow_pickle,
                keep_quantized=self.keep_quantized,
                on_convert=ctx.progress_callback("convert"),
            )
        if llm.files.from_gguf and llm.handle.spec.storage:
            ctx.log(f"{resolved.name}: weights kept quantized ({fmt_bytes(llm.handle.weight_bytes)})")
        elif llm.files.from_gguf:
            ctx.log(f"{resolved.name}: using the converted copy in {llm.files.folder}")
        return {"llm": llm}


@node_type(
    "LLMGenerate",
    title="LLM Generate",
    category="llm",
    tags=("TextGenerate",),  # ComfyUI's name for it (nodes/comfy/mapping_text.py)
    outputs=[Output("text", types.TEXT)],
    description="Generate text, streaming each token; reports time to first token and tokens/s.",
)
class LLMGenerate(Node):
    """Its fields named as GenerationRequest's and SamplingParams' are passed to them by name."""

    llm: LLMModel = wire(types.LLM)
    image: Any = wire(
        types.IMAGE,
        optional=True,
        help="Pictures for a vision model (Qwen2.5-VL, Qwen3-VL) to look at: each image of the batch goes into "
        'the prompt before its text ("describe this picture").',
    )
    prompt: str = param(
        TEXT,
        "What is the capital of France? Answer in one sentence.",
        help="What to ask (the user turn in chat mode).",
    )
    system_prompt: str = param(
        TEXT, "", help="Chat mode: the system message; empty uses the model's default."
    )
    prompts: str = param(
        TEXT,
        "",
        help="Several prompts, one per line, instead of `prompt`: decoded together in one batch (up to 8 "
        "at a time, each as it would be alone); `text` is their answers in order, separated by blank lines.",
    )
    chat: bool = param(BOOL, True, help="Wrap the prompt in the model's chat template.")
    sampling: str = param(
        CHOICE,
        "greedy",
        choices=("greedy", "sample"),
        help="greedy: always the most likely token (reproducible); sample: draw with the settings below.",
    )
    max_new_tokens: int = param(INT, 128, min=1, max=32768)
    temperature: float = param(
        FLOAT, 0.7, min=0.0, max=5.0, step=0.05, help="sample: lower is more focused, higher more varied."
    )
    top_k: int = param(INT, 0, min=0, max=100000, help="sample: keep the k best tokens (0 = all).")
    top_p: float = param(
        FLOAT,
        1.0,
        min=0.01,
        max=1.0,
        step=0.01,
        help="sample: keep the smallest set of tokens whose probability reaches p (1 = all).",
    )
    min_p: float = param(
        FLOAT,
        0.0,
        min=0.0,
        max=1.0,
        step=0.01,
        help="sample: drop tokens less likely than min_p times the most likely one (0 = off).",
    )
    repetition_penalty: float = param(
        FLOAT,
        1.0,
        min=0.5,
        max=3.0,
        step=0.05,
        help="Above 1 discourages repeating tokens already in the prompt or output.",
    )
    seed: int = param(SEED, 0, min=0, max=SEED_MAX, help="sample: the same seed gives the same text.")
    stop: str = param(
        STRING,
        "",
        help="Stop strings, separated by | (write \\n for a newline); not included in the output.",
    )
    context_tokens: int = param(
        INT, 0, min=0, max=1_048_576, help="KV cache to budget, in tokens; 0 = prompt + max_new_tokens."
    )
    kv_cache: str = param(
        CHOICE,
        "dynamic",
        choices=("dynamic", "static"),
        help="dynamic grows per token; static allocates the whole context up front.",
    )

    def request(self, prompt: str | None = None) -> Any:
        """The `GenerationRequest` these fields make (for `prompt`, default the node's own); the server's
        chats build theirs here too, so a chat answers exactly as this node does."""
        from pipelines.llm.chat import parse_stop_strings
        from pipelines.llm.runtime import GenerationRequest
        from pipelines.llm.sampling import SamplingParams

        sampling = (
            SamplingParams(repetition_penalty=self.repetition_penalty)
            if self.sampling == "greedy"
            else settings_from(SamplingParams, self, temperature=max(self.temperature, 1e-5))
        )
        prompt = self.prompt if prompt is None else prompt
        return settings_from(
            GenerationRequest,
            self,
            prompt=prompt,
            sampling=sampling,
            stop_strings=parse_stop_strings(self.stop),
        )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.llm.runtime import generate_text

        llm = self.llm
        pictures = self._pictures()
        if self.prompts.strip():
            if pictures:
                raise ValueError("field 'image': pictures go with one prompt, not with the list in 'prompts'")
            return self._run_batch(ctx)
        if not self.prompt.strip():
            raise ValueError("field 'prompt': the prompt is empty")
        check_llm_prompt(self.prompt + self.system_prompt, llm.context_length, llm.name)
        request = self.request()
        out = generate_text(
            ctx.memory,
            llm,
            request,
            on_text=ctx.text,
            on_step=lambda step: ctx.progress(step.step, step.total, kind="decode_token"),
            images=pictures,
        )
        for name, value in out.metrics.items():
            ctx.metric(name, value)
        ctx.log(
            f"{len(out.result.tokens)} tokens ({out.result.stop_reason}); first after {out.result.ttft_s:.2f} s, "
            f"then {out.result.decode_tokens_per_s:.1f} tokens/s"
        )
        return {"text": out.text.strip()}

    def _pictures(self) -> list[Any]:
        """The IMAGE input as PIL pictures (none when unconnected); a text-only model refuses them."""
        if self.image is None:
            return []
        if not self.llm.takes_images:
            raise ValueError(
                f"field 'image': {self.llm.name} takes no pictures (load a Qwen2.5-VL or Qwen3-VL model folder)"
            )
        from pipelines.llm.vision import to_pil

        return to_pil(self.image)

    def _run_batch(self, ctx: NodeContext) -> dict[str, Any]:
        import time

        from pipelines.llm.batch_runtime import generate_texts

        llm = self.llm
        prompts = [line.strip() for line in self.prompts.splitlines() if line.strip()]
        for prompt in prompts:
            check_llm_prompt(prompt + self.system_prompt, llm.context_length, llm.name)
        finished: list[int] = []

        def on_done(index: int, out: Any) -> None:
            finished.append(index)
            ctx.progress(len(finished), len(prompts), kind="answer")

        started = time.perf_counter()
        outs = generate_texts(ctx.memory, llm, [self.request(p) for p in prompts], on_done=on_done)
        wall = time.perf_counter() - started
        texts = [out.text.strip() for out in outs]
        for text in texts:
            ctx.text(text + "\n\n")
        tokens = sum(len(out.result.tokens) for out in outs)
        metrics = {
            "ttft_s": min(out.result.ttft_s for out in outs),
            "decode_tokens_per_s": tokens / wall if wall > 0 else 0.0,
            "kv_bytes": float(sum(out.kv_reserved_bytes for out in outs)),
            "tokens": float(tokens),
            "prompt_tokens": float(sum(out.result.prompt_tokens for out in outs)),
            "prompts": float(len(prompts)),
        }
        for name, value in metrics.items():
            ctx.metric(name, value)
        ctx.log(
            f"{len(prompts)} prompts, {tokens} tokens in {wall:.2f} s ({metrics['decode_tokens_per_s']:.1f} tokens/s)"
        )
        return {"text": "\n\n".join(texts)}


NODES: tuple[NodeSpec, ...] = (LoadLLM.spec, LLMGenerate.spec)
