"""LoRA patch modes side by side: sampler time per step and extra memory, fused vs on the fly vs no LoRA.

Runs `resources/workflows/txt2img_lora.json` (shapes-sd + the shipped outline LoRA, or --model/--lora) in one
process, alternating the modes so machine load hits them alike: `auto` (the model stays resident, patches
fused), `stream` with the default budget (every block resident, patches on the fly) and strength 0 (no
LoRA). Prints seconds per sampler step (median over --repeats runs), each mode's ratio to "no LoRA", and the
extra bytes each mode holds (the run report's `patches` rows).

    OMP_NUM_THREADS=1 python benchmarks/lora_patch.py --repeats 5 --steps 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from memory import MemoryConfig, MemoryManager  # noqa: E402
from memory.ledger import fmt_bytes  # noqa: E402
from nodes.executor import Executor  # noqa: E402
from nodes.registry import default_registry  # noqa: E402
from nodes.workflow import workflow_from_dict  # noqa: E402

MODES = {"fused": ("auto", 1.0), "on the fly": ("stream", 1.0), "no LoRA": ("auto", 0.0)}


def run_once(registry, data: dict, policy: str, strength: float, out: Path) -> tuple[float, int]:
    data = json.loads(json.dumps(data))
    data["nodes"]["lora"]["params"]["strength_model"] = strength
    mm = MemoryManager(MemoryConfig(device="cpu", policy=policy))
    try:
        result = Executor(registry, memory=mm).run(workflow_from_dict(data, registry), out_dir=out)
        if not result.ok:
            raise SystemExit(result.error)
        report = mm.report()
    finally:
        mm.close()
    steps = [s["seconds"] for s in report["steps"] if s["kind"] == "sampler_step"][1:]  # first step warms up
    extra = max((p["nbytes"] for p in report["patches"] if p["component"] == "unet"), default=0)
    return statistics.median(steps), extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:shapes-sd")
    parser.add_argument("--lora", default="builtin:shapes-sd-loras/outline.safetensors")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/nodeloom-lora-bench"))
    args = parser.parse_args()
    data = json.loads((REPO / "resources" / "workflows" / "txt2img_lora.json").read_text())
    data["nodes"]["load"]["params"]["path"] = args.model
    data["nodes"]["lora"]["params"]["path"] = args.lora
    data["nodes"]["sampler"]["params"]["steps"] = args.steps
    data["nodes"]["sampler"]["params"]["preview_every"] = 0
    registry = default_registry(entry_point_packs=False)
    times: dict[str, list[float]] = {m: [] for m in MODES}
    extra: dict[str, int] = {}
    for _ in range(args.repeats):
        for mode, (policy, strength) in MODES.items():
            seconds, nbytes = run_once(registry, data, policy, strength, args.out)
            times[mode].append(seconds)
            extra[mode] = nbytes
    base = statistics.median(times["no LoRA"])
    print(f"{'mode':<12} {'s/step':>9} {'vs no LoRA':>11} {'extra bytes':>12}")
    for mode in MODES:
        t = statistics.median(times[mode])
        print(f"{mode:<12} {t:>9.4f} {t / base:>10.2f}x {fmt_bytes(extra[mode]):>12}")


if __name__ == "__main__":
    main()
