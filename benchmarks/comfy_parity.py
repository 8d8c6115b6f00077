"""Same picture as ComfyUI: queue an API-format workflow on a running ComfyUI server, run the same file with
Nodeloom (`app --run FILE --models-dir ROOT`), and print the mean / max absolute pixel difference.

    python main.py --cpu --listen 127.0.0.1 --port 8199          # in a ComfyUI checkout (see FINDINGS)
    python benchmarks/comfy_parity.py --server http://127.0.0.1:8199 --comfy-dir ~/ComfyUI \
        [--workflow benchmarks/comfy_parity_sd15.api.json]

The workflow's checkpoint name must exist under COMFY_DIR/models/checkpoints; both runs use it by name.
Imports app.main (the CLI) and the standard library; prints, never asserts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent


def queue_and_wait(server: str, prompt: dict, output_dir: Path, prefix: str, timeout_s: float) -> Path:
    before = set(output_dir.glob(f"{prefix}_*.png"))
    body = json.dumps({"prompt": prompt}).encode()
    request = urllib.request.Request(
        f"{server}/prompt", data=body, headers={"Content-Type": "application/json"}
    )
    print(urllib.request.urlopen(request).read().decode())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = set(output_dir.glob(f"{prefix}_*.png")) - before
        if new:
            time.sleep(1.0)  # let the writer finish
            return sorted(new)[-1]
        time.sleep(2.0)
    raise TimeoutError(f"ComfyUI wrote no {prefix}_*.png in {timeout_s:.0f} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", default="http://127.0.0.1:8199")
    p.add_argument("--comfy-dir", type=Path, required=True, help="the ComfyUI checkout (models/, output/)")
    p.add_argument("--workflow", type=Path, default=HERE / "comfy_parity_sd15.api.json")
    p.add_argument("--timeout", type=float, default=1800.0)
    args = p.parse_args()
    prompt = json.loads(args.workflow.read_text())
    prefix = "nodeloom_parity"
    for node in prompt.values():
        if node["class_type"] == "SaveImage":
            node["inputs"]["filename_prefix"] = prefix
    theirs = queue_and_wait(args.server, prompt, args.comfy_dir / "output", prefix, args.timeout)

    from app.main import main as app_main

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        code = app_main(
            ["--run", str(args.workflow), "--models-dir", str(args.comfy_dir), "--out", str(out), "--quiet"]
        )
        if code != 0:
            print(f"Nodeloom run failed (exit {code})", file=sys.stderr)
            return code
        ours = next(out.glob("*.png"))
        a = np.asarray(Image.open(theirs).convert("RGB"), dtype=np.int16)
        b = np.asarray(Image.open(ours).convert("RGB"), dtype=np.int16)
    diff = np.abs(a - b)
    print(f"{args.workflow.name}: {a.shape[1]}x{a.shape[0]}, picture std {a.std():.1f}")
    print(f"mean absolute difference {diff.mean():.3f}/255, max {diff.max()}/255 (bar: mean <= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
