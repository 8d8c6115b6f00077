"""The "Run sweep..." dialog: which parameters to sweep, their values, grid or paired, here or on Ray.

Lives here: `SweepDialog`, `SweepChoice`. Imports Qt, `app.batch.execute`, `nodes`. The values use the CLI's
SPEC syntax (`1..16`, `1,2,3`, `0.5..1.5:0.25`, `@file.txt`); the job count (or what is wrong) updates as
the user types, and Run is enabled only for a sweep that would start.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from app.batch.execute import SweepPlan, prepare_sweep
from nodes.registry import NodeRegistry
from nodes.sweep import SweepError
from nodes.workflow import Workflow

WHERE = ("This computer", "Ray: a local instance (one worker per GPU)", "Ray: an existing cluster")
SPEC_HINT = "1..16   1,2,3   0.5..1.5:0.25   @prompts.txt"


@dataclass(frozen=True)
class SweepChoice:
    plan: SweepPlan
    cluster: str | None  # None: this process; "ray", "auto" or "ray://HOST:PORT"
    workers: int


def sweepable(wf: Workflow, registry: NodeRegistry) -> list[str]:
    """`node.param` for every parameter set on a node (not fed by a wire), seeds first."""
    found = []
    for nid, node in wf.nodes.items():
        spec = registry.get(node.type)
        for param in spec.params if spec else ():
            if param.name not in node.inputs:
                found.append((param.kind != "seed", f"{nid}.{param.name}"))
    return [target for _, target in sorted(found, key=lambda item: item[0])]


class SweepDialog(QDialog):
    def __init__(self, wf: Workflow, registry: NodeRegistry, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Run sweep")
        self.wf, self.registry = wf, registry
        self.targets = sweepable(wf, registry)
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["Parameter", "Values"])
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setColumnWidth(0, 240)  # room for "node.parameter"
        self.table.verticalHeader().setVisible(False)
        add, remove = QPushButton("Add parameter"), QPushButton("Remove")
        add.clicked.connect(lambda: self.add_row())
        remove.clicked.connect(self._remove_row)
        self.zip = QCheckBox("Pair the values in order (zip) instead of every combination")
        self.zip.toggled.connect(self._update)
        self.where = QComboBox()
        self.where.addItems(WHERE)
        self.address = QLineEdit("auto")
        self.address.setPlaceholderText("auto or ray://HOST:10001")
        self.workers = QSpinBox()
        self.workers.setRange(1, 256)
        self.workers.setValue(2)
        self.workers.setToolTip("Workers when the cluster has no GPUs (one per GPU otherwise)")
        self.where.currentIndexChanged.connect(self._update)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.run_button = self.buttons.addButton("Run sweep", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

        row = QHBoxLayout()
        row.addWidget(add)
        row.addWidget(remove)
        row.addStretch(1)
        form = QFormLayout()
        form.addRow("Run on", self.where)
        form.addRow("Cluster address", self.address)
        form.addRow("CPU workers", self.workers)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(f"Values: {SPEC_HINT}"))
        layout.addWidget(self.table, 1)
        layout.addLayout(row)
        layout.addWidget(self.zip)
        layout.addLayout(form)
        layout.addWidget(self.summary)
        layout.addWidget(self.buttons)
        self.resize(620, 420)
        seed = next((t for t in self.targets if self._is_seed(t)), None)
        if seed is not None:
            start = int(self.wf.nodes[seed.split(".")[0]].params.get(seed.split(".")[1]) or 0)
            self.add_row(seed, f"{start}..{start + 3}")
        else:
            self.add_row()

    def _is_seed(self, target: str) -> bool:
        node_id, param = target.split(".", 1)
        spec = self.registry.get(self.wf.nodes[node_id].type)
        found = spec.param(param) if spec else None
        return found is not None and found.kind == "seed"

    def add_row(self, target: str | None = None, values: str = "") -> None:
        row = self.table.rowCount()
        self.table.insertRow(row)
        combo = QComboBox()
        combo.addItems(self.targets)
        if target is not None:
            combo.setCurrentText(target)
        combo.currentIndexChanged.connect(self._update)
        edit = QLineEdit(values)
        edit.setPlaceholderText(SPEC_HINT)
        edit.textChanged.connect(self._update)
        self.table.setCellWidget(row, 0, combo)
        self.table.setCellWidget(row, 1, edit)
        self._update()

    def _remove_row(self) -> None:
        row = self.table.currentRow() if self.table.currentRow() >= 0 else self.table.rowCount() - 1
        if row >= 0:
            self.table.removeRow(row)
        self._update()

    def items(self) -> list[str]:
        """The sweep as `--sweep` arguments: `node.param=SPEC`, rows with no values left out."""
        out = []
        for row in range(self.table.rowCount()):
            combo, edit = self.table.cellWidget(row, 0), self.table.cellWidget(row, 1)
            if isinstance(combo, QComboBox) and isinstance(edit, QLineEdit) and edit.text().strip():
                out.append(f"{combo.currentText()}={edit.text().strip()}")
        return out

    def cluster(self) -> str | None:
        index = self.where.currentIndex()
        return None if index == 0 else ("ray" if index == 1 else self.address.text().strip() or "auto")

    def plan(self) -> SweepPlan | None:
        try:
            return prepare_sweep(self.wf, self.items(), self.registry, zip_axes=self.zip.isChecked())
        except SweepError:
            return None

    def choice(self) -> SweepChoice | None:
        plan = self.plan()
        return None if plan is None else SweepChoice(plan, self.cluster(), self.workers.value())

    def _update(self) -> None:
        self.address.setEnabled(self.where.currentIndex() == 2)
        self.workers.setEnabled(self.where.currentIndex() != 0)
        if not self.items():
            self.summary.setText("Give values for at least one parameter.")
            self.run_button.setEnabled(False)
            return
        try:
            plan = prepare_sweep(self.wf, self.items(), self.registry, zip_axes=self.zip.isChecked())
        except SweepError as exc:
            self.summary.setText(f"<span style='color:#f77'>{exc}</span>")
            self.run_button.setEnabled(False)
            return
        self.summary.setText(f"{len(plan.jobs)} job(s)")
        self.run_button.setEnabled(True)
