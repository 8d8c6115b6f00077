"""Memory's error type and byte formatting: the leaf every other memory module may import.

Lives here: `BudgetExceeded`, `fmt_bytes`. May import: stdlib only (so nothing in memory/ needs a lazy
import to reach them).
"""

from __future__ import annotations


def fmt_bytes(n: int | None) -> str:
    """1536 -> "1.50 KiB"; None -> "?"."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{n} B"


class BudgetExceeded(MemoryError):
    """A load or reservation can't fit in the budget even after evicting every unlocked model.

    The message says what needed how much, how much could be had, and ends with the ledger (what was
    where), once: callers that add context must not append the ledger again (`ledger_text` holds it).
    `note`: why the budget has less than it says, when it does (on a CPU: what the process itself holds).
    """

    def __init__(self, what: str, needs: int, has: int, ledger_text: str, note: str = "") -> None:
        self.what, self.needs, self.has, self.ledger_text = what, needs, has, ledger_text
        message = f"{what} needs {fmt_bytes(needs)} but only {fmt_bytes(has)} of the budget can be freed"
        message += f": {note}." if note else "."
        super().__init__(f"{message}\n{ledger_text}" if ledger_text else message)
