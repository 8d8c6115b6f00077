"""Writing the report and the sweep's files: refused up front when impossible, a clear exit 1 on a full disk
with the outputs kept, and atomic writes for the contact sheet, files sent back by Ray and saved model roots.

A full disk is simulated by making the temp-file write of one target fail with ENOSPC (`/dev/full` cannot be
used: an atomic write creates its temporary file in the target's own folder).
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from PIL import Image

import nodes.files
from app.batch.contact_sheet import write_contact_sheet
from app.batch.execute import write_outputs
from app.batch.worker import JobResult
from app.main import main
from nodes.sweep import SweepAxis

REPO = Path(__file__).resolve().parent.parent
TEXT_DEMO = REPO / "resources/workflows/text_demo.json"


def _full_disk_for(monkeypatch, name: str) -> None:
    """Writing a file called `name` fails as on a full disk; every other write works."""
    real = nodes.files._write_temp

    def write_temp(path, write, mode):
        if Path(path).name == name:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, write, mode)

    monkeypatch.setattr(nodes.files, "_write_temp", write_temp)


@pytest.mark.parametrize("sweep", [[], ["--sweep", "name.text=a,b"]])
def test_a_report_under_a_file_is_refused_before_running(tmp_path: Path, capsys, sweep) -> None:
    (tmp_path / "taken").write_text("a file, not a folder")
    out = tmp_path / "out"
    argv = ["--run", str(TEXT_DEMO), "--out", str(out), "--quiet", "--report", str(tmp_path / "taken/r.json")]
    assert main([*argv, *sweep]) == 2
    err = capsys.readouterr().err
    assert "--report" in err and str(tmp_path / "taken") in err and "is a file" in err
    assert "Traceback" not in err and "FileExistsError" not in err
    assert not out.exists()  # nothing ran


def test_a_full_disk_at_the_report_exits_1_and_keeps_the_outputs(tmp_path: Path, capsys, monkeypatch) -> None:
    _full_disk_for(monkeypatch, "report.json")
    out = tmp_path / "out"
    argv = ["--run", str(TEXT_DEMO), "--out", str(out), "--quiet", "--report", str(tmp_path / "report.json")]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "cannot write the report" in err and "report.json" in err and "No space left on device" in err
    assert [p.read_text() for p in out.glob("greeting_*.txt")] == ["Hello from Nodeloom!"]


def test_a_full_disk_at_the_sweep_report_exits_1_and_keeps_the_outputs(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    _full_disk_for(monkeypatch, "sweep.json")
    out = tmp_path / "out"
    assert main(["--run", str(TEXT_DEMO), "--out", str(out), "--quiet", "--sweep", "name.text=a,b"]) == 1
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "sweep.json" in err and "No space left on device" in err
    assert sorted(p.read_text() for p in out.glob("greeting*.txt")) == ["Hello from a!", "Hello from b!"]


def _picture_job(out_dir: Path, index: int) -> JobResult:
    name = f"j{index}.png"
    Image.new("RGB", (8, 8), (index * 40, 0, 0)).save(out_dir / name)
    return JobResult(index=index, values={"sampler.seed": index}, status="ok", outputs=[name])


def test_a_contact_sheet_that_fails_half_way_leaves_the_previous_one_whole(
    tmp_path: Path, monkeypatch
) -> None:
    axes = [SweepAxis("sampler", "seed", (0, 1), "--sweep sampler.seed=0,1")]
    results = [_picture_job(tmp_path, 0), _picture_job(tmp_path, 1)]
    write_contact_sheet(results, axes, tmp_path)
    before = (tmp_path / "sweep.png").read_bytes()

    def torn_save(self, fp, format=None, **params):  # writes a few bytes, then the disk is full
        Path(fp).write_bytes(b"\x89PNG\r\n")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Image.Image, "save", torn_save)
    with pytest.raises(OSError):
        write_contact_sheet(results, axes, tmp_path)
    assert (tmp_path / "sweep.png").read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_file_sent_back_by_a_worker_is_never_left_torn(tmp_path: Path, monkeypatch) -> None:
    def torn_write(self, data):  # half the bytes, then the disk is full
        with open(self, "wb") as f:
            f.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", torn_write)
    result = JobResult(index=0, values={}, status="ok", files={"j000.png": b"x" * 1000})
    with pytest.raises(OSError):
        write_outputs(result, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_saved_model_roots_go_through_the_atomic_writer(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("NODELOOM_DATA_DIR", str(tmp_path / "data"))
    written: list[str] = []
    real = nodes.files._write_temp

    def spy(path, write, mode):
        written.append(Path(path).name)
        return real(path, write, mode)

    monkeypatch.setattr(nodes.files, "_write_temp", spy)
    (tmp_path / "models").mkdir()
    assert main(["models", "add-root", str(tmp_path / "models")]) == 0
    settings = Path(capsys.readouterr().out.strip().rsplit(" ", 1)[1])
    assert written == [settings.name]
    assert json.loads(settings.read_text()) == {"roots": [str((tmp_path / "models").resolve())]}
