"""Outputs and saved files: whole or absent, 0644 under the usual umask, no temp files left behind."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.main import main
from nodes.files import atomic_write_text, clean_stale_temp_files, write_new_output

REPO = Path(__file__).resolve().parent.parent
TEXT_DEMO = REPO / "resources/workflows/text_demo.json"


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_saved_outputs_are_0644_under_umask_022(tmp_path, umask_022) -> None:
    assert main(["--run", str(TEXT_DEMO), "--out", str(tmp_path), "--quiet"]) == 0
    (written,) = tmp_path.glob("greeting_*.txt")
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    assert written.read_text() == "Hello from Nodeloom!"
    assert [p.name for p in tmp_path.iterdir()] == [written.name]  # no temp file left


def test_the_umask_is_respected(tmp_path) -> None:
    old = os.umask(0o077)
    try:
        path = write_new_output(tmp_path, "x", ".txt", lambda tmp: tmp.write_text("hi"))
        atomic_write_text(tmp_path / "r.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o600


def test_a_failed_save_leaves_no_file_at_all(tmp_path) -> None:
    def half_then_fail(tmp: Path) -> None:
        tmp.write_text("partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_new_output(tmp_path, "img", ".png", half_then_fail)
    assert list(tmp_path.iterdir()) == []  # neither an empty img_00001.png nor a temp file
    # The next save takes the first number: nothing was reserved by the failure.
    assert write_new_output(tmp_path, "img", ".png", lambda t: t.write_bytes(b"ok")).name == "img_00001.png"


def test_outputs_never_overwrite(tmp_path) -> None:
    first = write_new_output(tmp_path, "a", ".txt", lambda t: t.write_text("1"))
    (tmp_path / "a_00002.txt").write_text("someone else's")
    third = write_new_output(tmp_path, "a", ".txt", lambda t: t.write_text("3"))
    assert (first.name, third.name) == ("a_00001.txt", "a_00003.txt")
    assert (tmp_path / "a_00002.txt").read_text() == "someone else's"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temp_files_of_dead_writers_are_cleaned(tmp_path) -> None:
    dead = tmp_path / f".r.json.nodeloom-{_dead_pid()}-0123abcd.tmp"
    live = tmp_path / f".r.json.nodeloom-{os.getppid()}-0123abcd.tmp"  # a running process's
    legacy_old = tmp_path / ".r.json.abcd1234.tmp"  # what mkstemp-based versions left
    legacy_new = tmp_path / ".r.json.wxyz9876.tmp"  # recent: may still be written by an old version
    legacy_other = tmp_path / ".notes.txt.abcd1234.tmp"  # not a file we write: never touched
    foreign = tmp_path / ".cache.tmp"
    for p in (dead, live, legacy_old, legacy_new, legacy_other, foreign):
        p.write_text("partial")
    day_ago = time.time() - 86400
    os.utime(legacy_old, (day_ago, day_ago))
    os.utime(legacy_other, (day_ago, day_ago))
    atomic_write_text(tmp_path / "r.json", "{}")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([live.name, legacy_new.name, legacy_other.name, foreign.name, "r.json"])
    assert clean_stale_temp_files(tmp_path) == []


def test_the_folder_is_fsynced_after_the_rename(tmp_path, monkeypatch) -> None:
    synced_dirs: list[bool] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced_dirs.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    atomic_write_text(tmp_path / "r.json", "{}")
    write_new_output(tmp_path, "x", ".txt", lambda t: t.write_text("hi"))
    assert synced_dirs.count(True) == 2 and synced_dirs[-1] is True
