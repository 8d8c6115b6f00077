"""Sizes and budgets as users write them."""

from __future__ import annotations

import pytest

from memory import MemoryConfig, MemoryManager, parse_bytes
from memory.config import parse_budget


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("6GiB", 6 * 1024**3),
        ("512MB", 512 * 1000**2),
        ("1.5G", int(1.5 * 1024**3)),
        ("300 MiB", 300 * 1024**2),
        ("1024", 1024),
        (4096, 4096),
        ("2kb", 2000),
    ],
)
def test_parse_bytes(text: str | int, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["", "six gigs", "5 parsecs", "-1", True])
def test_parse_bytes_rejects_nonsense(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_bytes(bad)  # type: ignore[arg-type]


def test_budget_is_a_size_a_fraction_or_everything() -> None:
    assert parse_budget("0.5", 1000) == 500
    assert parse_budget(None, 1000) == 1000
    assert parse_budget("1GiB", 10) == 1024**3
    assert parse_budget("2", 1000) == 2  # above 1: a byte count, not a fraction


def test_cpu_budget_is_ram_less_reserve(tmp_path) -> None:
    cfg = MemoryConfig(device="cpu", ram_budget="1GiB", reserve="100MiB", data_dir=tmp_path)
    with MemoryManager(cfg) as mm:
        assert mm.budget == 1024**3 - 100 * 1024**2
        assert str(mm.device) == "cpu" and mm.policy.name == "auto"


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="stream"):
        MemoryConfig(policy="yolo")
