"""The memory options every command that runs workflows takes: `--run`, `--sweep` and `app serve`.

Lives here: `add_memory_arguments`. Imports argparse, `memory.policy`. `app.cli.memory_config(args)` turns
the parsed values into the one `MemoryConfig`.
"""

from __future__ import annotations

import argparse

from memory.policy import POLICIES, POLICY_NAMES


def add_memory_arguments(p: argparse.ArgumentParser) -> None:
    """--device, --offload, --vram-budget, --ram-budget."""
    p.add_argument("--device", default="auto", help="auto | cpu | cuda:N | mps (default auto)")
    p.add_argument(
        "--offload",
        default="auto",
        choices=POLICY_NAMES,
        help="how models share the device (default auto): "
        + "; ".join(f"{policy.name}: {policy.help}" for policy in POLICIES),
    )
    p.add_argument(
        "--vram-budget",
        help="GPU/accelerator memory budget: bytes (6GiB) or a fraction of free memory (0.5); no effect on CPU",
    )
    p.add_argument(
        "--ram-budget",
        help="host RAM budget: bytes (8GiB) or a fraction of available RAM (0.5); on CPU it is the one budget, "
        "with a GPU it bounds the offloaded copies kept in RAM",
    )
