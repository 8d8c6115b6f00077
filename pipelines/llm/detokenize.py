"""Token ids -> text deltas while generating: whole characters only, stop strings held back.

Lives here: `IncrementalDetokenizer`, `StopStringFilter`, `TextStream`. Imports transformers' tokenizer
base type only.

A byte-level BPE token can hold half of a UTF-8 character ("é", "🎉" span several tokens), and a
sentencepiece decoder drops the leading space of the first token it sees. So each step decodes a
short window of recent ids twice -- up to the last emitted token, and up to the new one -- and emits
the difference, waiting while the text ends in U+FFFD (an incomplete character). Same scheme as
vLLM's `detokenize_incrementally` (prefix_offset / read_offset).
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

_INCOMPLETE = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self.prefix_offset = 0  # start of the decode window
        self.read_offset = 0  # ids before this are already emitted

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, token_id: int) -> str:
        """Add one token; returns the text it completes (may be "" while a character is incomplete)."""
        self.ids.append(token_id)
        before = self._decode(self.ids[self.prefix_offset : self.read_offset])
        after = self._decode(self.ids[self.prefix_offset :])
        if len(after) <= len(before) or after.endswith(_INCOMPLETE):
            return ""
        self.prefix_offset = self.read_offset
        self.read_offset = len(self.ids)
        return after[len(before) :]

    def flush(self) -> str:
        """Whatever is still held back at the end (an incomplete character comes out as U+FFFD)."""
        before = self._decode(self.ids[self.prefix_offset : self.read_offset])
        after = self._decode(self.ids[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.ids)
        return after[len(before) :] if len(after) > len(before) else ""


class StopStringFilter:
    """Passes text through until a stop string appears; never lets out the start of one too early."""

    def __init__(self, stop_strings: tuple[str, ...] | list[str]) -> None:
        self.stop_strings = tuple(s for s in stop_strings if s)
        self.pending = ""  # text held back because it could be the start of a stop string
        self.stopped = False

    def _held_back(self, text: str) -> int:
        """Length of the longest tail of `text` that is a proper prefix of some stop string."""
        best = 0
        for stop in self.stop_strings:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best

    def feed(self, delta: str) -> str:
        """The part of `delta` (plus held-back text) that is safe to emit."""
        if self.stopped:
            return ""
        text = self.pending + delta
        hits = [i for i in (text.find(s) for s in self.stop_strings) if i >= 0]
        if hits:
            self.stopped = True
            self.pending = ""
            return text[: min(hits)]
        keep = self._held_back(text)
        self.pending = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out


class TextStream:
    """Detokenizer + stop strings: `push(token)` -> delta to show; `stopped` once a stop string hit."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, stop_strings: tuple[str, ...] | list[str] = ()
    ) -> None:
        self.detokenizer = IncrementalDetokenizer(tokenizer)
        self.stops = StopStringFilter(stop_strings)
        self.text = ""  # everything emitted so far

    @property
    def stopped(self) -> bool:
        return self.stops.stopped

    def push(self, token_id: int) -> str:
        delta = self.stops.feed(self.detokenizer.push(token_id))
        self.text += delta
        return delta

    def finish(self) -> str:
        delta = self.stops.feed(self.detokenizer.flush()) + self.stops.flush()
        self.text += delta
        return delta
