"""The node palette: a popup with fuzzy search over every registered node type.

Lives here: `STRONG`, `fuzzy_score`, `USER_WORDS`, `BLUEPRINT_ROLE`, `NodePalette`. Imports Qt, `nodes.registry`.
The user's blueprints (app/gui/subgraph_blueprints.py) come first, under "Blueprints", from `extra_entries`. Tab or a double-click
on empty canvas opens it; Enter (or a click) inserts the highlighted node at the remembered position.
Search covers titles, type names, categories, tags, the words users bring from other tools (checkpoint,
ksampler, clip...), ComfyUI class names (tags on the specs) and descriptions. Exact, prefix and word
matches rank first; scattered-letter matches only show when nothing matches well.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl, Signal
from PySide6.QtGui import QGuiApplication, QKeyEvent
from PySide6.QtWidgets import QFrame, QLabel, QLineEdit, QListWidget, QListWidgetItem, QVBoxLayout, QWidget

from nodes.registry import NodeRegistry
from nodes.spec import NodeSpec

# A match scoring at least this (exact, prefix, word start, substring, a known user word) is "good": when a
# query has good matches, the weak ones (letters scattered through a title, a word in a description) go.
STRONG = 100.0


def fuzzy_score(query: str, text: str) -> float | None:
    """None when `query`'s letters do not appear in order in `text`; higher is a better match: exact, then
    prefix, then the start of a word, then any substring, then (weak, below STRONG) letters in order."""
    query, text = query.lower().strip(), text.lower()
    if not query:
        return 0.0
    if query == text:
        return 400.0
    if text.startswith(query):
        return 250.0 - 0.1 * len(text)
    if query in text:
        index = text.index(query)
        at_word = any(text.startswith(query, i + 1) for i, ch in enumerate(text) if ch in " _-./")
        return (180.0 if at_word else STRONG) - 0.5 * index - 0.1 * len(text)
    score, pos, prev, letters = 0.0, 0, -2, 0
    for ch in query:
        if ch == " ":
            continue
        found = text.find(ch, pos)
        if found < 0:
            return None
        letters += 1
        score += 3 if found == prev + 1 else 1
        if found == 0 or text[found - 1] in " _-.":
            score += 2
        prev, pos = found, found + 1
    # Letters scattered one by one ("note" in "Load Text Encoder Files") are noise, not a match.
    if score < 2 * letters:
        return None
    return min(score - 0.05 * len(text), STRONG - 1)


# The names people arrive with (ComfyUI, A1111, tutorials) -> our node types. Other helpers' node types are
# listed by type name; an entry for a type that is not registered is simply ignored.
USER_WORDS: dict[str, tuple[str, ...]] = {
    "checkpoint": ("LoadDiffusionModel",),
    "ckpt": ("LoadDiffusionModel",),
    "load checkpoint": ("LoadDiffusionModel",),
    "model": ("LoadDiffusionModel", "LoadDenoiser"),
    "unet": ("LoadDenoiser",),
    "clip": ("TextEncode",),
    "clip text encode": ("TextEncode",),
    "prompt": ("TextEncode", "Text"),
    "conditioning": ("TextEncode",),
    "ksampler": ("Sampler",),
    "ksampler advanced": ("Sampler",),
    "sample": ("Sampler",),
    "empty latent image": ("EmptyLatent",),
    "latent": ("EmptyLatent",),
    "vae": ("VAEDecode", "VAEEncode", "LoadVAE"),
    "vae decode": ("VAEDecode",),
    "vae encode": ("VAEEncode",),
    "save": ("SaveImage", "SaveText"),
    "save image": ("SaveImage",),
    "preview": ("PreviewImage",),
    "lora": ("LoadLoRA", "LoraLoader"),
    "upscale": ("UpscaleImage", "LatentUpscale", "ImageScale"),
    "llm": ("LoadLLM", "LLMGenerate"),
    "chat": ("LLMGenerate",),
    "primitive": ("Int", "Float", "Text", "Bool", "Seed"),
    "img2img": ("LoadImage", "VAEEncode"),
    "image to image": ("LoadImage", "VAEEncode"),
    "inpaint": ("InpaintConditioning", "SetLatentNoiseMask"),
}


def user_word_score(query: str, spec: NodeSpec) -> float | None:
    """A strong score when the query is (the start of) a word users know for this node."""
    q = query.lower().strip()
    if len(q) < 2:
        return None
    best = None
    for word, types in USER_WORDS.items():
        if spec.type in types and word.startswith(q):
            # Earlier in the list is the more usual meaning; the whole word outranks a title that merely starts with it ("save" is mostly Save Image).
            base = 260.0 if word == q else 160.0
            score = base - types.index(spec.type) * 5 - (len(word) - len(q)) * 0.5
            best = score if best is None else max(best, score)
    return best


def description_score(query: str, spec: NodeSpec) -> float | None:
    """Whole-word-ish matches in the description rank below title matches."""
    q = query.lower().strip()
    if len(q) < 3 or q not in spec.description.lower():
        return None
    return 20.0


class _DragList(QListWidget):
    """The palette's list; a blueprint entry drags out as its file, which the window takes on drop."""

    def mimeData(self, items: list[QListWidgetItem]) -> QMimeData:  # noqa: N802 (Qt name)
        data = QMimeData()
        files = [i.data(BLUEPRINT_ROLE) for i in items if i.data(BLUEPRINT_ROLE)]
        data.setUrls([QUrl.fromLocalFile(f) for f in files])
        return data


# Item data holding a blueprint's file (app/gui/subgraph_blueprints.py), where a node type has its type name.
BLUEPRINT_ROLE = Qt.ItemDataRole.UserRole + 1


class NodePalette(QFrame):
    node_chosen = Signal(str, QPointF)
    blueprint_chosen = Signal(str, QPointF)  # a blueprint file and where it goes

    def __init__(self, registry: NodeRegistry, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Popup)
        self.registry = registry
        self.at = QPointF()
        # Only node types that accept (or give) this wire, when opened from a dropped wire.
        self.accepts: Callable[[NodeSpec], bool] | None = None
        # (title, category, file) entries that are not node types: the user's blueprints.
        self.extra_entries: Callable[[], list[tuple[str, str, str]]] = list
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setMinimumSize(340, 380)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search nodes… (type, Enter to add, Esc to close)")
        self.list = _DragList()
        self.list.setDragEnabled(True)
        self.hint = QLabel()
        self.hint.setObjectName("hint")
        self.hint.setWordWrap(True)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.hint)
        self.search.textChanged.connect(self.set_query)
        self.list.itemActivated.connect(lambda _item: self.accept_current())
        self.list.itemClicked.connect(lambda _item: self.accept_current())
        self.list.currentItemChanged.connect(self._show_hint)
        self.search.installEventFilter(self)
        self.set_query("")

    def open_at(
        self,
        scene_pos: QPointF,
        global_pos: object | None = None,
        accepts: Callable[[NodeSpec], bool] | None = None,
    ) -> None:
        self.at = scene_pos
        self.accepts = accepts
        self.search.clear()
        self.set_query("")
        if global_pos is not None:
            pos = QPoint(global_pos)  # type: ignore[call-overload]
            screen = QGuiApplication.screenAt(pos) or QGuiApplication.primaryScreen()
            if screen is not None:  # keep the whole popup on the screen
                area = screen.availableGeometry()
                pos.setX(max(area.left(), min(pos.x(), area.right() - self.width())))
                pos.setY(max(area.top(), min(pos.y(), area.bottom() - self.height())))
            self.move(pos)
        self.show()
        self.search.setFocus()

    def matches(self, query: str) -> list[NodeSpec]:
        scored = []
        for spec in self.registry:
            if self.accepts is not None and not self.accepts(spec):
                continue
            # Each tag alone, so a ComfyUI class name (a tag) is an exact match.
            texts = [spec.title, spec.type, f"{spec.category} {spec.title}", *spec.tags]
            scores = [fuzzy_score(query, t) for t in texts]
            scores += [user_word_score(query, spec), description_score(query, spec)]
            best = max((s for s in scores if s is not None), default=None)
            if best is not None:
                scored.append((best, spec))
        if not query.strip():
            return sorted((s for _, s in scored), key=lambda s: (s.category, s.title))
        if any(score >= STRONG for score, _ in scored):
            scored = [(score, spec) for score, spec in scored if score >= STRONG]
        return [s for _, s in sorted(scored, key=lambda p: (-p[0], p[1].title))]

    def extra_matches(self, query: str) -> list[tuple[str, str, str]]:
        """The blueprints matching `query` (all of them for an empty one); none for a dropped wire."""
        if self.accepts is not None:
            return []
        scored = []
        for entry in self.extra_entries():
            scores = [fuzzy_score(query, entry[0]), fuzzy_score(query, f"{entry[1]} {entry[0]}")]
            best = max((s for s in scores if s is not None), default=None)
            if best is not None and (not query.strip() or best >= STRONG):
                scored.append((best, entry))
        return [e for _, e in sorted(scored, key=lambda p: (-p[0], p[1][0]))]

    def set_query(self, query: str) -> None:
        self.list.clear()
        for title, category, file in self.extra_matches(query):
            item = QListWidgetItem(f"{title}    ·  {category}")
            item.setData(BLUEPRINT_ROLE, file)
            item.setToolTip(f"A saved subgraph ({file}); click, Enter or drag it onto the canvas")
            self.list.addItem(item)
        for spec in self.matches(query):
            item = QListWidgetItem(f"{spec.title}    ·  {spec.category}")
            item.setData(Qt.ItemDataRole.UserRole, spec.type)
            item.setToolTip(spec.description)
            self.list.addItem(item)
        if self.list.count():
            self.list.setCurrentRow(0)

    def _show_hint(self, item: QListWidgetItem | None) -> None:
        if item is not None and item.data(BLUEPRINT_ROLE):
            self.hint.setText(f"Blueprint: a saved subgraph ({item.data(BLUEPRINT_ROLE)})")
            return
        spec = self.registry.get(item.data(Qt.ItemDataRole.UserRole)) if item else None
        self.hint.setText(spec.description if spec else "")

    def accept_current(self) -> str | None:
        item = self.list.currentItem()
        if item is None:
            return None
        type_name = item.data(Qt.ItemDataRole.UserRole)
        self.hide()
        if item.data(BLUEPRINT_ROLE):
            self.blueprint_chosen.emit(item.data(BLUEPRINT_ROLE), self.at)
            return item.data(BLUEPRINT_ROLE)
        self.node_chosen.emit(type_name, self.at)
        return type_name

    def eventFilter(self, watched: object, event: object) -> bool:
        if isinstance(event, QKeyEvent) and event.type() == QKeyEvent.Type.KeyPress:
            key = event.key()
            if key in (Qt.Key.Key_Down, Qt.Key.Key_Up):
                row = self.list.currentRow() + (1 if key == Qt.Key.Key_Down else -1)
                self.list.setCurrentRow(max(0, min(self.list.count() - 1, row)))
                return True
            if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
                self.accept_current()
                return True
            if key == Qt.Key.Key_Escape:
                self.hide()
                return True
        return super().eventFilter(watched, event)  # type: ignore[arg-type]
