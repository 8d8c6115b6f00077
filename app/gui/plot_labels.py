"""Where the memory plot's load/unload labels go: measured on screen, so that none overlaps another.

Lives here: `LABEL_SPOTS`, `layout_labels`. Imports nothing from Nodeloom; works on pyqtgraph items.
A sequential run loads and unloads several models within a fraction of a second, so their lines sit a few
pixels apart; the labels (rotated along their lines, two short lines each) are placed greedily from left to
right in the first free spot, and a label with no room is left out and named by a shown neighbour.
"""

from __future__ import annotations

from typing import Any

# Where a load/unload label may sit on its line, in order of preference: (fraction of the plot's height,
# text anchor). The text runs upwards along the line: anchor x 0 starts it at that height, 1 ends it there
# (hanging from the top); anchor y picks the side of the line.
LABEL_SPOTS = (
    (0.03, (0, 1)),
    (0.03, (0, 0)),
    (0.97, (1, 1)),
    (0.97, (1, 0)),
)


def layout_labels(plot: Any, texts: dict[Any, str]) -> None:
    """Place each label of `texts` (marker line of `plot` -> its text) where it overlaps no other label nor
    the legend, measured on screen: at the bottom or hanging from the top of its line, right or left of it.
    A label with no free place is hidden: the label shown before it (or, for the first ones, after it) names
    it in its tooltip and says "(+N)" when that still fits."""
    lines = sorted(texts, key=lambda line: line.value())
    view = plot.getViewBox()
    view.updateMatrix()  # a range set this redraw is otherwise applied only at the next paint
    box = view.sceneBoundingRect()
    legend = plot.legend
    # A legend inside the plot (the memory plot keeps its own outside): a label must not run under it.
    placed: list[Any] = [legend.mapRectToScene(legend.boundingRect())] if legend.isVisible() else []
    shown: dict[Any, Any] = {}  # line -> where its label is
    last_shown: Any = None
    hidden_after: dict[Any, list[str]] = {}  # shown line -> the labels elided next to it
    waiting: list[str] = []
    for line in lines:
        line.viewTransformChanged()  # its cached extent in the view (the label's ends) may predate this range
        label = line.label
        label.setVisible(True)  # an invisible TextItem keeps a stale transform
        label.setFormat(texts[line])
        line.setToolTip(texts[line])
        spot = None
        for position, anchor in LABEL_SPOTS:
            label.anchors = [anchor, anchor]
            label.setPosition(position)
            # pyqtgraph caches the line's ends in the view and applies the rotation at paint: refresh both
            label.viewTransformChanged()
            label.updateTransform(force=True)
            rect = label.mapRectToScene(label.boundingRect())
            if box.contains(rect) and not any(rect.intersects(other) for other in placed):
                spot = rect
                break
        if spot is None or not line.isVisible():
            label.setVisible(False)
            if last_shown is not None:
                hidden_after.setdefault(last_shown, []).append(texts[line])
            else:  # nothing shown before it yet: the next label shown names it
                waiting.append(texts[line])
            continue
        placed.append(spot)
        shown[line] = spot
        last_shown = line
        if waiting:
            hidden_after[line], waiting = waiting, []
    for line, names in hidden_after.items():
        line.setToolTip("\n".join([texts[line], *names]))
        label = line.label
        label.setFormat(f"{texts[line]} (+{len(names)})")
        label.viewTransformChanged()
        label.updateTransform(force=True)
        rect = label.mapRectToScene(label.boundingRect())
        others = [r for r in placed if r is not shown[line]]
        if not box.contains(rect) or any(rect.intersects(r) for r in others):
            label.setFormat(texts[line])  # no room to say so: the tooltip still does
