"""A seeded sample of hostile sweep flags and GGUF headers: each refused in well under a second, no traceback.

The mutators are in tests/fuzz_mutations.py (`INPUT_MUTATIONS`): grids past the job cap, range ends past a
float, and GGUF headers whose counts exceed the file.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.fuzz_mutations import INPUT_MUTATIONS, check_input, generate_input_mutants


def test_hostile_sweeps_and_gguf_headers_are_refused_quickly(tmp_path: Path) -> None:
    from nodes.registry import default_registry

    registry = default_registry(entry_point_packs=False)
    failures: list[str] = []
    seen: set[str] = set()
    for mutant in generate_input_mutants(40, seed=5):
        seen.add(mutant.mutation)
        started = time.monotonic()
        checked = check_input(mutant, tmp_path, registry)
        seconds = time.monotonic() - started
        if checked.error is not None:
            failures.append(f"{mutant.name}: traceback {checked.message[:300]}")
        elif checked.exit_code == 0:
            failures.append(f"{mutant.name}: accepted {mutant.sweep or mutant.data[:40]!r}")
        elif mutant.mutation == "gguf_array_sizes" and f"{mutant.name}.gguf" not in checked.message:
            failures.append(f"{mutant.name}: the message does not name the file: {checked.message}")
        elif len(checked.message.encode()) >= 1024:
            failures.append(f"{mutant.name}: a {len(checked.message.encode()):,}-byte message")
        # Generous for a loaded 2-core box: parsing two 100,000-value axes is the slowest case here.
        if seconds > 5:
            failures.append(f"{mutant.name}: {seconds:.1f} s")
    assert seen == set(INPUT_MUTATIONS)
    assert not failures, "\n".join(failures)
