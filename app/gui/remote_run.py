"""File > Connect to Server: Run sends the open graph to a local or remote `app serve`, and its progress comes
back into the same docks (node states, timeline, log, output pictures) as a local run's.

Lives here: `RemoteUi` (installed by the main window with one call), `RemoteRun` (one run on a worker thread),
`ConnectDialog`, `EventTranslator` (ComfyUI websocket messages -> `nodes.events`), `reach_message`. Imports
Qt, `app.server.client` (stdlib + aiohttp, no Qt), `nodes.events`, PIL.

The translator turns the server's messages back into the executor's own events, so the window's
`on_run_event` shows a server run exactly as it shows a local one: `executing` starts a node (and ends the
one before), `progress` is a sampling step, `executed` ends a node with its pictures (fetched through `/view`
into the output folder's `server/` subfolder) and its text, `execution_cached` and `execution_error` mark
nodes. Network calls run on plain threads; their results come back as queued signals.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QWidget,
)

from app.gui.run_worker import TimedEvent
from nodes.events import (
    NodeCached,
    NodeFailed,
    NodeFinished,
    NodePreview,
    NodeProgress,
    NodeStarted,
    NodeText,
    RunFinished,
    RunStarted,
)

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow
    from app.server.client import ServerClient, ServerError

DEFAULT_URL = "http://127.0.0.1:8188"
CHECK_TIMEOUT_S = 5.0  # connecting: a server that does not answer /queue in 5 s is reported unreachable


def reach_message(base: str, exc: ServerError) -> str:
    """What to tell the user when the server cannot be used: unreachable, token refused, or its own error."""
    if exc.status in (401, 403):
        return (
            f"The server at {base} refused the token (HTTP {exc.status}). Enter the token it was started with "
            "(app serve --auth-token TOKEN, or its token file) in File > Connect to Server."
        )
    if exc.status is None:
        return (
            f"Cannot reach a Nodeloom server at {base}: {str(exc).split(': ', 1)[-1]}. Is `app serve` running "
            "there (app serve --host 127.0.0.1 --port 8188), and is the address right?"
        )
    return f"The server at {base} refused the request: {exc}"


class EventTranslator:
    """One server run's websocket messages -> executor events, handed to `emit` with the local clock's time."""

    def __init__(
        self,
        client: ServerClient,
        out_dir: Path,
        emit: Callable[[Any], None],
        node_types: dict[str, str],
    ) -> None:
        self.client, self.out_dir, self.emit, self.types = client, out_dir, emit, node_types
        self.current: str | None = None
        self.started_at = 0.0
        self.step_started = 0.0
        self.failed = False
        self.executed: set[str] = set()

    def _finish_current(self, files: tuple[str, ...] = ()) -> None:
        if self.current is not None:
            node = self.current
            self.current = None
            self.emit(NodeFinished(node, self.types.get(node, ""), time.monotonic() - self.started_at, files))

    def __call__(self, message: dict[str, Any]) -> None:
        kind, data = message.get("type"), message.get("data") or {}
        if kind == "execution_start":
            self.emit(RunStarted(0, tuple(self.types)))
        elif kind == "execution_cached":
            for node in data.get("nodes") or []:
                self.emit(NodeCached(node, self.types.get(node, "")))
        elif kind == "executing":
            self._finish_current()
            node = data.get("node")
            if node is not None:
                self.current, self.started_at = node, time.monotonic()
                self.step_started = self.started_at
                self.emit(NodeStarted(node, self.types.get(node, "")))
        elif kind == "progress":
            now = time.monotonic()
            rate = 1.0 / max(now - self.step_started, 1e-6)
            self.step_started = now
            node = data.get("node") or self.current or ""
            self.emit(NodeProgress(node, int(data.get("value", 0)), int(data.get("max", 0)), rate))
        elif kind == "executed":
            node = data.get("node")
            self.executed.add(node)
            output = data.get("output") or {}
            files = tuple(self._fetch(node, ref) for ref in output.get("images") or [])
            for text in output.get("text") or []:
                self.emit(NodeText(node, str(text), final=True))
            if node == self.current:
                self._finish_current(tuple(f for f in files if f))
        elif kind == "execution_error":
            self.failed = True
            node = data.get("node_id") or self.current or ""
            seconds = time.monotonic() - self.started_at if node == self.current else 0.0
            self.current = None
            self.emit(
                NodeFailed(
                    node,
                    data.get("node_type") or self.types.get(node, ""),
                    str(data.get("exception_type", "")),
                    str(data.get("exception_message", "failed")),
                    seconds,
                )
            )

    def catch_up(self, reply: dict[str, Any]) -> None:
        """The reply's outputs whose `executed` message had not arrived when the reply did (the client stops
        reading the websocket once `/run` answers), then the end of the last node."""
        for node, output in (reply.get("outputs") or {}).items():
            if node not in self.executed and isinstance(output, dict):
                self({"type": "executed", "data": {"node": node, "output": output}})
        self._finish_current()

    def _fetch(self, node: str, ref: dict[str, str]) -> str:
        """A picture the server made, copied into the output folder; its final preview goes on the node."""
        from PIL import Image

        try:
            data = self.client.fetch(ref)
            target = self.out_dir / "server" / Path(ref.get("filename", "picture.png")).name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            with Image.open(BytesIO(data)) as picture:
                self.emit(NodePreview(node, picture.convert("RGB"), final=True))
            return str(target)
        except Exception:  # a picture that cannot be fetched does not end the run; the log has the rest
            return ""


class RemoteRun(QObject):
    """One run of a workflow on a server, on a worker thread."""

    run_event = Signal(object)  # TimedEvent
    finished = Signal(object)  # the /run reply (dict)
    failed = Signal(str)  # a user-facing message (unreachable, token refused, refused request)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thread: threading.Thread | None = None
        self.client: ServerClient | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(
        self, client: ServerClient, workflow: dict[str, Any], out_dir: Path, now: Callable[[], float]
    ) -> None:
        from app.server.client import ServerError

        self.client = client
        types = {nid: str(node.get("type", "")) for nid, node in workflow.get("nodes", {}).items()}
        t0 = time.monotonic()

        def emit(event: Any) -> None:
            self.run_event.emit(TimedEvent(now(), event))

        def work() -> None:
            translate = EventTranslator(client, out_dir, emit, types)
            try:
                reply = client.run(workflow, translate)
            except ServerError as exc:
                emit(RunFinished(0, False, False, time.monotonic() - t0, str(exc)))
                self.failed.emit(reach_message(client.base, exc))
                return
            except Exception as exc:  # a broken connection mid-run: say so, keep the editor
                emit(RunFinished(0, False, False, time.monotonic() - t0, str(exc)))
                self.failed.emit(f"The run on {client.base} broke off: {type(exc).__name__}: {exc}")
                return
            translate._finish_current()
            reply = (
                reply if isinstance(reply, dict) else {"ok": False, "error": f"unexpected reply: {reply!r}"}
            )
            cancelled = reply.get("status") == "interrupted"
            emit(RunFinished(0, bool(reply.get("ok")), cancelled, time.monotonic() - t0, reply.get("error")))
            reply.setdefault("seconds", time.monotonic() - t0)
            self.finished.emit(reply)

        self._thread = threading.Thread(target=work, name="nodeloom-remote-run", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        client = self.client
        if client is not None:
            threading.Thread(target=lambda: _quietly(client.interrupt), daemon=True).start()

    def wait(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)


def _quietly(call: Callable[[], Any]) -> None:
    try:
        call()
    except Exception:  # an interrupt that does not arrive: the run ends on its own
        pass


class ConnectDialog(QDialog):
    def __init__(self, url: str, token: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Connect to Server")
        self.setMinimumWidth(480)
        form = QFormLayout(self)
        self.url = QLineEdit(url)
        self.url.setPlaceholderText(DEFAULT_URL)
        self.token = QLineEdit(token)
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("none (a server on 127.0.0.1 needs none)")
        form.addRow("Server address", self.url)
        form.addRow("Token", self.token)
        hint = QLabel(
            "Start one with: app serve (loopback) or app serve --host 0.0.0.0 --auth-token TOKEN. "
            "Run then sends the open graph there; progress and pictures come back here."
        )
        hint.setObjectName("hint")
        hint.setWordWrap(True)
        form.addRow(hint)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Connect")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)


class RemoteUi(QObject):
    """The menu actions, the connection (checked on a thread) and the window's hooks for remote runs."""

    _checked = Signal(object, str)  # client or None, message (worker -> GUI thread)

    def __init__(self, window: MainWindow, file_menu: Any) -> None:
        super().__init__(window)
        self.window = window
        self.client: ServerClient | None = None
        self.run = RemoteRun(self)
        self.error_box: QMessageBox | None = None
        self.connect_action = QAction("Connect to &Server…", window)
        self.connect_action.setToolTip("Run the open graph on a local or remote `app serve`")
        self.connect_action.triggered.connect(self.open_dialog)
        self.disconnect_action = QAction("&Disconnect from Server", window)
        self.disconnect_action.setEnabled(False)
        self.disconnect_action.triggered.connect(self.disconnect)
        before = window.settings_action
        file_menu.insertAction(before, self.connect_action)
        file_menu.insertAction(before, self.disconnect_action)
        file_menu.insertSeparator(before)
        self._checked.connect(self._on_checked, Qt.ConnectionType.QueuedConnection)
        queued = Qt.ConnectionType.QueuedConnection  # emitted on the run's thread
        self.run.run_event.connect(window.on_run_event, queued)
        self.run.finished.connect(self._finished, queued)
        self.run.failed.connect(self._failed, queued)

    @property
    def connected(self) -> bool:
        return self.client is not None

    def open_dialog(self) -> None:
        q = self.window.settings.q
        dialog = ConnectDialog(str(q.value("server/url", DEFAULT_URL)), "", self.window)
        if dialog.exec():
            self.connect_to(dialog.url.text().strip() or DEFAULT_URL, dialog.token.text().strip() or None)

    def connect_to(self, url: str, token: str | None) -> None:
        """Check the server answers (GET /queue, with the token) on a thread; then runs go there."""
        from app.server.client import ServerClient, ServerError

        if "://" not in url:
            url = "http://" + url
        self.window.settings.q.setValue("server/url", url)
        self.window.status(f"Connecting to {url}…")
        client = ServerClient(url, token, timeout=CHECK_TIMEOUT_S)

        def check() -> None:
            try:
                client.request("/queue")
            except ServerError as exc:
                self._checked.emit(None, reach_message(url, exc))
                return
            client.timeout = 3600.0  # a run's reply waits for the run
            self._checked.emit(client, "")

        threading.Thread(target=check, name="nodeloom-connect", daemon=True).start()

    def _on_checked(self, client: object, message: str) -> None:
        if client is None:
            self._show_error("Cannot connect to the server", message)
            return
        self.client = client  # type: ignore[assignment]
        self.disconnect_action.setEnabled(True)
        self.window.server_label.setText(f"Server: {self.client.base}")
        self.window.status(f"Connected to {self.client.base}: Run sends the graph there")
        self.window.output.add_log(f"Connected to {self.client.base}; runs go to the server")

    def disconnect(self) -> None:
        if self.client is not None:
            self.window.output.add_log(f"Disconnected from {self.client.base}; runs are local again")
        self.client = None
        self.disconnect_action.setEnabled(False)
        self.window.server_label.setText("")
        self.window.status("Disconnected: runs are local again")

    def _show_error(self, title: str, message: str) -> None:
        self.window.status(message)
        self.window.output.add_log(message)
        self.error_box = QMessageBox(QMessageBox.Icon.Warning, title, message, parent=self.window)
        self.error_box.setModal(False)
        self.error_box.show()

    def start(self, workflow: dict[str, Any], label: str) -> bool:
        """Run on the server (Run's hook when connected); one server run at a time."""
        w = self.window
        if self.client is None:
            return False
        if self.run.running:
            w.status("A run on the server is in progress: wait for it or press Cancel")
            return False
        w.scene.clear_run_states()
        w.problem_marks_at = None
        w.output.new_run()
        w.plots.new_run()
        w.output.add_log(
            f"Run on {self.client.base} started ({len(workflow.get('nodes', {}))} nodes): {label}"
        )
        w.last_result = None
        w._set_running(True)
        self.run.start(self.client, workflow, w.settings.output_dir, w.runner.now)
        return True

    def _finished(self, reply: dict[str, Any]) -> None:
        w = self.window
        w._set_running(False)
        w.last_result = reply
        seconds = float(reply.get("seconds", 0.0))
        if reply.get("ok"):
            w.status(f"Done on the server in {seconds:.2f} s")
            w.output.add_log(
                f"Run on {self.client.base if self.client else 'the server'} finished in {seconds:.2f} s"
            )
        elif reply.get("status") == "interrupted":
            w.status("Run on the server cancelled")
            w.output.add_log("Run on the server cancelled")
        else:
            error = str(reply.get("error") or "failed")
            w.status(f"Run on the server failed: {error.splitlines()[0]}")
            w.output.add_log(f"Run on the server failed: {error}")

    def _failed(self, message: str) -> None:
        self.window._set_running(False)
        self._show_error("Run on the server failed", message)


def install(window: MainWindow, file_menu: Any) -> RemoteUi:
    return RemoteUi(window, file_menu)
