"""OpenAI's `POST /v1/chat/completions` as an LLM graph (LoadLLM -> LLMGenerate): the request becomes that
graph (checked like any workflow), and the run thread's chat batch (`chat_engine`) decodes it with the
request the node would build, so the answer is the graph's.

Lives here: `ChatRefused`, `chat_workflow`, `completion`, `chunk`, `finish_chunk`, `usage`, `timings`,
`openai_error`. Imports `nodes.workflow`
(FORMAT, VERSION), `pipelines.models_library`; the LLM itself only through the node types (never
`pipelines.llm` directly).

`model` is `builtin:smollm2` (also `smollm2`, and the default) or a file name inside the models folders,
confined as every name a request gives. `messages` become the node's system prompt (every system message)
and prompt (the last user message, with the earlier turns written before it as "User: ... / Assistant:
..." lines: the node takes one turn). `temperature` > 0 samples (with `top_p`, `seed`); absent or 0 is greedy.
`stop` is a string or a list; `max_tokens` (or `max_completion_tokens`) defaults to 128.
"""

from __future__ import annotations

import time
from typing import Any

from nodes.workflow import FORMAT, VERSION
from pipelines.models_library import ModelsLibrary, NameEscapeError

DEFAULT_MODEL = "builtin:smollm2"
GENERATE = "generate"  # the LLMGenerate node's id in the graph built here
LOAD = "llm"


class ChatRefused(Exception):
    """A chat request that cannot run; `param` names the field, as OpenAI's errors do."""

    def __init__(self, message: str, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


def openai_error(
    message: str, param: str | None = None, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def _model_path(model: Any, library: ModelsLibrary) -> tuple[str, bool]:
    """(LoadLLM's path, whether the server resolved it inside the roots)."""
    if model is None or model == "smollm2":
        return DEFAULT_MODEL, False
    if not isinstance(model, str) or not model:
        raise ChatRefused("model: a model name expected", "model")
    if model.startswith(("builtin:", "demo:")):
        return model, False
    try:
        found = library.find_inside(model)
    except NameEscapeError as exc:
        raise ChatRefused(f"model: {exc}", "model") from None
    if found is None:
        raise ChatRefused(f"model: {library.not_found_message(model)}", "model")
    return str(found), True


def _content(message: Any, index: int) -> tuple[str, str]:
    if not isinstance(message, dict):
        raise ChatRefused(f"messages[{index}]: an object with role and content expected", "messages")
    role, content = message.get("role"), message.get("content")
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        content = "\n".join(p for p in parts if isinstance(p, str))
    if role not in ("system", "developer", "user", "assistant") or not isinstance(content, str):
        raise ChatRefused(
            f"messages[{index}]: role system, user or assistant with text content expected", "messages"
        )
    return ("system" if role == "developer" else role), content


def _number(body: dict[str, Any], name: str, low: float, high: float, integer: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        return None
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
        raise ChatRefused(
            f"{name}: a {'whole ' if integer else ''}number from {low:g} to {high:g} expected", name
        )
    return value


def chat_workflow(
    body: Any, library: ModelsLibrary
) -> tuple[dict[str, Any], set[tuple[str, str]], dict[str, Any]]:
    """The request -> (our workflow's data, the fields the server resolved, the settings echoed back)."""
    if not isinstance(body, dict):
        raise ChatRefused("expected a JSON object with model and messages")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ChatRefused("messages: a non-empty list expected", "messages")
    turns = [_content(m, i) for i, m in enumerate(messages)]
    if turns[-1][0] != "user":
        raise ChatRefused("messages: the last message must be the user's", "messages")
    system = "\n\n".join(text for role, text in turns if role == "system")
    history = [f"{role.capitalize()}: {text}" for role, text in turns[:-1] if role != "system"]
    prompt = "\n".join([*history, f"User: {turns[-1][1]}"]) if history else turns[-1][1]
    path, resolved = _model_path(body.get("model"), library)
    max_tokens = _number(body, "max_completion_tokens", 1, 32768, True) or _number(
        body, "max_tokens", 1, 32768, True
    )
    temperature = _number(body, "temperature", 0, 5)
    top_p = _number(body, "top_p", 0.01, 1)
    seed = _number(body, "seed", 0, 2**63 - 1, True)
    stop = body.get("stop")
    stops = (
        [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else [] if stop is None else None
    )
    if stops is None or not all(isinstance(s, str) and "|" not in s for s in stops):
        raise ChatRefused("stop: a string or a list of strings (without '|') expected", "stop")
    params: dict[str, Any] = {
        "prompt": prompt,
        "system_prompt": system,
        "chat": True,
        "max_new_tokens": max_tokens or 128,
        "sampling": "sample" if temperature else "greedy",
        "stop": "|".join(s.replace("\n", "\\n") for s in stops),
    }
    if temperature:
        params["temperature"] = float(temperature)
    if top_p is not None:
        params["top_p"] = float(top_p)
    if seed is not None:
        params["seed"] = seed
    workflow = {
        "format": FORMAT,
        "version": VERSION,
        "meta": {"title": "chat completion"},
        "nodes": {
            LOAD: {"type": "LoadLLM", "params": {"path": path}, "inputs": {}},
            GENERATE: {"type": "LLMGenerate", "params": params, "inputs": {"llm": [LOAD, "llm"]}},
        },
    }
    model = body.get("model") if isinstance(body.get("model"), str) else DEFAULT_MODEL
    return (
        workflow,
        {(LOAD, "path")} if resolved else set(),
        {"model": model, "max_tokens": params["max_new_tokens"]},
    )


def _finish_reason(tokens: float | None, max_tokens: int) -> str:
    return "length" if tokens is not None and tokens >= max_tokens else "stop"


def usage(metrics: dict[str, float]) -> dict[str, int]:
    prompt_tokens, tokens = int(metrics.get("prompt_tokens", 0)), int(metrics.get("tokens") or 0)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": tokens,
        "total_tokens": prompt_tokens + tokens,
    }


def timings(metrics: dict[str, float]) -> dict[str, float]:
    """Not in OpenAI's schema (its clients keep unknown fields): time to first token, prompt and decode
    speed, and how many chats were decoded together with this one."""
    return {
        "ttft_s": round(metrics.get("ttft_s", 0.0), 4),
        "prompt_tokens_per_s": round(metrics.get("prefill_tokens_per_s", 0.0), 2),
        "tokens_per_s": round(metrics.get("decode_tokens_per_s", 0.0), 2),
        "batch_size": int(metrics.get("batch_size", 1)),
    }


def completion(cid: str, settings: dict[str, Any], text: str, metrics: dict[str, float]) -> dict[str, Any]:
    """The non-streamed answer, OpenAI's `chat.completion` object (plus `timings`)."""
    tokens = metrics.get("tokens")
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": settings["model"],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": _finish_reason(tokens, settings["max_tokens"]),
            }
        ],
        "usage": usage(metrics),
        "timings": timings(metrics),
    }


def chunk(
    cid: str, settings: dict[str, Any], delta: dict[str, str], finish: str | None = None
) -> dict[str, Any]:
    """One streamed `chat.completion.chunk`."""
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": settings["model"],
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def finish_chunk(cid: str, settings: dict[str, Any], metrics: dict[str, float]) -> dict[str, Any]:
    """The last chunk: the finish reason, and the usage and timings (OpenAI sends usage on a chunk when
    asked with `stream_options.include_usage`; here always, its clients read it when present)."""
    last = chunk(cid, settings, {}, _finish_reason(metrics.get("tokens"), settings["max_tokens"]))
    return {**last, "usage": usage(metrics), "timings": timings(metrics)}
