"""What is wrong with a workflow: one `Problem` per reason, and the error that lists them.

Lives here: `Problem`, `WorkflowError`, `MESSAGE_CHARS`, and `quote` with `QUOTE_CHARS` (how a message names
a value the user gave, cut so that a 10 MiB string never becomes 10 MiB of stderr). Imports the standard
library only: everything that words a problem (`nodes.spec`, `nodes.workflow_json`, `nodes.workflow`)
imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MESSAGE_CHARS = 1500  # a WorkflowError's message stays under 2 KB however many problems there are
QUOTE_CHARS = 80


def quote(value: Any, limit: int = QUOTE_CHARS) -> str:
    """`repr(value)`, cut to `limit` characters with an ellipsis and the full length when longer."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}… ({len(value):,} characters)"
    try:
        text = repr(value)
    except RecursionError:
        return f"<a {type(value).__name__} nested too deep to show>"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


@dataclass(frozen=True)
class Problem:
    file: str
    node: str | None
    field: str | None
    reason: str

    def __str__(self) -> str:
        where = self.file if len(self.file) <= 300 else f"{self.file[:300]}…"
        if self.node is not None:
            where += f": node {quote(self.node)}"
        if self.field is not None:
            where += f", field {quote(self.field)}"
        return f"{where}: {self.reason}"


class WorkflowError(Exception):
    """A workflow that cannot run; `problems` lists every reason at once."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        count = len(problems)
        # A mutated file can have thousands of problems: list them until the message would pass
        # MESSAGE_CHARS, then count the rest (`problems` keeps them all, for the editor).
        lines: list[str] = []
        size = 0
        for p in problems:
            line = str(p)
            line = line if len(line) <= 400 else f"{line[:400]}…"
            if lines and size + len(line) > MESSAGE_CHARS:
                break
            lines.append(f"  - {line}")
            size += len(line) + 5
        if count > len(lines):
            lines.append(f"  ... and {count - len(lines)} more")
        text = "\n".join(lines)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in the workflow:\n{text}")
