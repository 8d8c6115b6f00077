"""`app serve` chats: 4 concurrent chats vs each chat alone, total tokens/s through the HTTP endpoint.

Lives here: a script (`python benchmarks/serve_chats.py [--tokens 128] [--repeats 2]`) printing both rates and
their ratio. Imports aiohttp (via `app.server.serve`), `memory`, `pipelines.models_library`; the standard
library's urllib is the client.

A server on a free loopback port with SmolLM2 (builtin, `keep_quantized=auto`), greedy chats of `--tokens`
new tokens at most (completion tokens are counted from each answer's usage: an answer may end early). A round
is the 4 chats sent one after another, each alone (one chat's tokens/s, over the same answers), then the same 4
sent at once from 4 threads; rounds alternate and the median counts. Total tokens/s = completion tokens of
the round / its wall time; the answers are the same both ways (greedy), so both count the same tokens.
Goal: 4 at once >= 2x.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `app` sets it (FINDINGS: spin-waits on 2 cores)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.server.options import ServeOptions  # noqa: E402
from app.server.serve import build_app, start_site  # noqa: E402
from memory import MemoryConfig  # noqa: E402
from nodes.registry import default_registry  # noqa: E402
from pipelines.models_library import ModelsLibrary  # noqa: E402

QUESTIONS = (
    "Tell me about the history of Paris.",
    "Explain how a bicycle works.",
    "Describe a day at the beach.",
    "Why do people keep gardens?",
)


def chat(base: str, question: str, tokens: int) -> dict:
    body = {"model": "smollm2", "messages": [{"role": "user", "content": question}], "max_tokens": tokens}
    request = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def round_of(base: str, questions: tuple[str, ...], tokens: int) -> tuple[float, int, list[dict]]:
    """(wall seconds, completion tokens, answers) of the questions sent at once."""
    answers: list[dict] = [{} for _ in questions]
    threads = [
        threading.Thread(target=lambda i=i: answers.__setitem__(i, chat(base, questions[i], tokens)))
        for i in range(len(questions))
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    return wall, sum(a["usage"]["completion_tokens"] for a in answers), answers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tokens", type=int, default=128, help="max_tokens of each chat (default 128, the endpoint's own)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="rounds, alternating (default 2)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        options = ServeOptions(
            out_dir=Path(tmp) / "out",
            input_dir=Path(tmp) / "in",
            memory=MemoryConfig(device="cpu", data_dir=Path(tmp) / "memory"),
            library=ModelsLibrary([]),
        )
        app = build_app(options, default_registry())
        ready, box = threading.Event(), {}

        def serve() -> None:
            async def go() -> None:
                runner, box["port"] = await start_site(app, "127.0.0.1", 0)
                box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
                ready.set()
                await box["stop"].wait()
                await runner.cleanup()

            asyncio.run(go())

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        ready.wait(60)
        base = f"http://127.0.0.1:{box['port']}"
        try:
            chat(base, "Hello", 4)  # load the model
            alone, together, last = [], [], []
            for _ in range(args.repeats):
                walls, n = 0.0, 0
                for question in QUESTIONS:  # one after another: each chat alone
                    wall, tokens, _ = round_of(base, (question,), args.tokens)
                    walls, n = walls + wall, n + tokens
                alone.append(n / walls)
                wall, n, last = round_of(base, QUESTIONS, args.tokens)
                together.append(n / wall)
        finally:
            box["loop"].call_soon_threadsafe(box["stop"].set)
            thread.join(60)
    one, four = statistics.median(alone), statistics.median(together)
    sizes = [a["timings"]["batch_size"] for a in last]
    lengths = [a["usage"]["completion_tokens"] for a in last]
    print(f"SmolLM2 via POST /v1/chat/completions, greedy, max_tokens {args.tokens}, {args.repeats} rounds")
    print(f"each chat alone (4 one after another): {one:.1f} tok/s")
    print(f"4 concurrent chats: {four:.1f} tok/s total (batch sizes seen: {sizes}, tokens: {lengths})")
    print(f"ratio 4 concurrent / one chat alone: {four / one:.2f}x (goal >= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
