"""Helpers for the video tests: tiny frame tensors and a context to run one video node in.

Imports torch, `nodes.context`, `pipelines.video.value`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from nodes.context import CancelToken, NodeContext
from nodes.events import NodeLog, RunEvent
from pipelines.video.value import Audio, Video


def smooth_frames(count: int = 9, height: int = 32, width: int = 48) -> torch.Tensor:
    """(T, H, W, 3) gradients that change every frame: lossy codecs keep them close (noise they would not)."""
    ys = torch.linspace(0, 1, height)[:, None]
    xs = torch.linspace(0, 1, width)[None, :]
    frames = [
        torch.stack(
            [
                (xs + t / count).remainder(1).expand(height, width),
                ys.expand(height, width),
                torch.full((height, width), t / count),
            ],
            -1,
        )
        for t in range(count)
    ]
    return torch.stack(frames).float()


def tone(seconds: float, rate: int, channels: int = 1) -> Audio:
    n = round(seconds * rate)
    wave = 0.3 * torch.sin(2 * math.pi * 440 * torch.arange(n) / rate)
    return Audio(wave[None].repeat(channels, 1).float(), rate)


def tiny_video(fps: float = 12.0, audio: Audio | None = None, **size: int) -> Video:
    return Video(smooth_frames(**size), fps, audio)


class Recorder:
    """A NodeContext for one node run (video nodes use no memory manager) and the events it emitted."""

    def __init__(self, out_dir: Path, workflow: dict[str, Any] | None = None) -> None:
        self.events: list[RunEvent] = []
        self.ctx = NodeContext(
            node_id="n",
            node_type="test",
            memory=None,  # type: ignore[arg-type]
            out_dir=out_dir,
            workflow_json=workflow,  # type: ignore[arg-type]
            emit=self.events.append,
            cancel=CancelToken(),
        )

    @property
    def logs(self) -> list[str]:
        return [e.message for e in self.events if isinstance(e, NodeLog)]
