"""A seeded sample of mutated workflow files: no traceback, every refusal exit 2 naming the file, < 2 KB.

The full 1,000-file run with timings is benchmarks/fuzz_workflows.py.
"""

from __future__ import annotations

import pytest

from tests.fuzz_mutations import MUTATIONS, SHIPPED, check_file, generate_mutants

# One mutant for every (shipped workflow, mutation) pair.
SAMPLE = len(SHIPPED) * len(MUTATIONS)


@pytest.fixture(scope="module")
def default_registry():
    from nodes.registry import default_registry

    return default_registry(entry_point_packs=False)


@pytest.mark.slow  # over 5 s in the fast lane on a loaded 2-core machine
def test_mutated_workflows_never_give_a_traceback(tmp_path, default_registry) -> None:
    failures: list[str] = []
    seen_kinds: set[str] = set()
    for mutant in generate_mutants(SAMPLE, seed=11):
        seen_kinds.add(mutant.mutation)
        path = tmp_path / f"{mutant.name}{mutant.suffix}"
        path.write_bytes(mutant.data)
        checked = check_file(path, default_registry)
        path.unlink()
        if checked.error is not None:
            failures.append(f"{mutant.name}: traceback {checked.message[:300]}")
        elif mutant.must_fail and checked.exit_code != 2:
            failures.append(f"{mutant.name}: accepted (exit {checked.exit_code})")
        elif checked.exit_code == 2:
            if len(checked.message.encode()) >= 2048:
                failures.append(f"{mutant.name}: a {len(checked.message.encode()):,}-byte message")
            if path.name not in checked.message:
                failures.append(f"{mutant.name}: the message does not name the file")
    assert seen_kinds == set(MUTATIONS)
    assert not failures, "\n".join(failures)
