"""Synthetic scene world for the tiny in-house text-to-image model.

Holds the vocabulary (palette, shapes, sizes, positions), the caption grammar, the deterministic PIL
renderer, the training-set sampler and the held-out (colour, shape, background) triples used as the
generalisation test. Everything else in ``training.shapes`` builds on these definitions.

May import only the standard library, numpy and PIL (no torch, no diffusers, never ``nodes``/``app``/Qt),
so that the evaluator and tests can use it cheaply.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from PIL import Image, ImageDraw

IMAGE_SIZE = 64

# Corners of the RGB cube: the eight colours furthest apart from each other, so that a blurry generated
# pixel still maps unambiguously to the intended palette entry.
PALETTE: dict[str, tuple[int, int, int]] = {
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "red": (255, 0, 0),
    "green": (0, 255, 0),
    "blue": (0, 0, 255),
    "yellow": (255, 255, 0),
    "cyan": (0, 255, 255),
    "magenta": (255, 0, 255),
}
COLOURS: tuple[str, ...] = tuple(PALETTE)
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
SIZES: tuple[str, ...] = ("small", "large")
POSITIONS: tuple[str, ...] = ("left", "center", "right")

# Nominal extent (pixels) of each size and horizontal centre of each position; the renderer jitters both
# a little so the model does not learn a single template per caption.
SIZE_PX: dict[str, int] = {"small": 16, "large": 28}
POSITION_X: dict[str, int] = {"left": 16, "center": 32, "right": 48}
POSITION_PHRASE: dict[str, str] = {"left": "on the left", "center": "in the center", "right": "on the right"}

# Never rendered by the training sampler: every colour, shape and background still appears in training,
# only these combinations do not, so generating them tests composition rather than memory.
HELD_OUT: tuple[tuple[str, str, str], ...] = (
    ("red", "circle", "white"),
    ("green", "square", "black"),
    ("blue", "triangle", "yellow"),
    ("yellow", "circle", "blue"),
    ("cyan", "triangle", "red"),
    ("magenta", "square", "green"),
    ("white", "triangle", "magenta"),
    ("black", "circle", "cyan"),
)

# Size and position are each left out of a caption this often, so short prompts also work.
MENTION_PROBABILITY = 0.75


@dataclass(frozen=True)
class Scene:
    """One picture: a single filled shape on a plain background."""

    colour: str
    shape: str
    background: str
    size: str
    position: str
    dx: int = 0
    dy: int = 0
    dsize: int = 0

    @property
    def triple(self) -> tuple[str, str, str]:
        return (self.colour, self.shape, self.background)


def caption(
    colour: str,
    shape: str,
    background: str,
    size: str | None = None,
    position: str | None = None,
) -> str:
    """The caption grammar: ``a [size] <colour> <shape> [position] on a <background> background``."""
    words = ["a"]
    if size:
        words.append(size)
    words += [colour, shape]
    if position:
        words.append(POSITION_PHRASE[position])
    words.append(f"on a {background} background")
    return " ".join(words)


def parse_caption(text: str) -> dict[str, str | None]:
    """Recover the attributes a caption asks for (inverse of :func:`caption`), used to score images."""
    words = text.lower().replace(",", " ").split()
    found: dict[str, str | None] = {
        "colour": None,
        "shape": None,
        "background": None,
        "size": None,
        "position": None,
    }
    if "background" in words:
        idx = words.index("background")
        if idx > 0 and words[idx - 1] in PALETTE:
            found["background"] = words[idx - 1]
    fg_words = words[: words.index("background") - 1] if found["background"] else words
    for word in fg_words:
        if word in PALETTE and found["colour"] is None:
            found["colour"] = word
        elif word in SHAPES:
            found["shape"] = word
        elif word in SIZES:
            found["size"] = word
        elif word in POSITIONS:
            found["position"] = word
    return found


def render_scene(scene: Scene) -> Image.Image:
    """Draw ``scene`` as a crisp 64x64 RGB image (deterministic: same scene, same pixels)."""
    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), PALETTE[scene.background])
    draw = ImageDraw.Draw(image)
    extent = SIZE_PX[scene.size] + scene.dsize
    cx = POSITION_X[scene.position] + scene.dx
    cy = IMAGE_SIZE // 2 + scene.dy
    x0, y0 = cx - extent // 2, cy - extent // 2
    x1, y1 = x0 + extent - 1, y0 + extent - 1
    fill = PALETTE[scene.colour]
    if scene.shape == "circle":
        draw.ellipse((x0, y0, x1, y1), fill=fill)
    elif scene.shape == "square":
        draw.rectangle((x0, y0, x1, y1), fill=fill)
    elif scene.shape == "triangle":
        draw.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=fill)
    else:
        raise ValueError(f"unknown shape {scene.shape!r}")
    return image


def random_scene(rng: random.Random, triple: tuple[str, str, str] | None = None) -> Scene:
    """A random scene, optionally with a fixed (colour, shape, background) triple."""
    if triple is None:
        colour = rng.choice(COLOURS)
        background = rng.choice([c for c in COLOURS if c != colour])
        shape = rng.choice(SHAPES)
    else:
        colour, shape, background = triple
    size = rng.choice(SIZES)
    # Jitter stays small enough that left/center/right remain separable by the centroid (thresholds 24/40).
    return Scene(
        colour,
        shape,
        background,
        size,
        rng.choice(POSITIONS),
        dx=rng.randint(-3, 3),
        dy=rng.randint(-6, 6),
        dsize=rng.randint(-2, 2),
    )


def random_caption(scene: Scene, rng: random.Random) -> str:
    """Caption for ``scene``; size and position are each mentioned with probability 0.75."""
    size = scene.size if rng.random() < MENTION_PROBABILITY else None
    position = scene.position if rng.random() < MENTION_PROBABILITY else None
    return caption(scene.colour, scene.shape, scene.background, size, position)


def training_scenes(count: int, seed: int = 0) -> Iterator[tuple[Scene, str]]:
    """The training set: ``count`` (scene, caption) pairs, never using a :data:`HELD_OUT` triple."""
    rng = random.Random(seed)
    held_out = set(HELD_OUT)
    produced = 0
    while produced < count:
        scene = random_scene(rng)
        if scene.triple in held_out:
            continue
        yield scene, random_caption(scene, rng)
        produced += 1


def held_out_prompts() -> list[dict[str, str | None]]:
    """Evaluation prompts: each held-out triple bare, with a size, with a position, and with both.

    Sizes and positions are balanced (one small, one large, one left, one right per triple) so neither the
    easier large shapes nor the harder small ones dominate the figures.
    """
    prompts: list[dict[str, str | None]] = []
    variants: list[tuple[str | None, str | None]] = [
        (None, None),
        ("large", None),
        (None, "right"),
        ("small", "left"),
    ]
    for colour, shape, background in HELD_OUT:
        for size, position in variants:
            prompts.append(
                {
                    "prompt": caption(colour, shape, background, size, position),
                    "colour": colour,
                    "shape": shape,
                    "background": background,
                    "size": size,
                    "position": position,
                }
            )
    return prompts


def vocabulary_words() -> list[str]:
    """Every word the grammar can produce (the tokenizer must keep each one a single token)."""
    words = {"a", "on", "the", "in", "background", *COLOURS, *SHAPES, *SIZES, *POSITIONS}
    return sorted(words)
