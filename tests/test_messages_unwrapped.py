"""Messages the CLI writes to a pipe or a file are never hard-wrapped, however long the path they name.

rich wraps at 80 columns when its stream is not a terminal unless told `soft_wrap=True`; a wrapped message
splits the words a script (or a test) looks for. capsys gives every command a non-terminal stderr.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.main import main

NOT_A_PNG = b"\x00\x01garbage" * 100


def _long_folder(tmp_path: Path) -> Path:
    # Past 80 columns whatever the temporary directory's own length (and under the ~200 characters past
    # which a message elides the path it quotes).
    folder = tmp_path.joinpath(*(["long-folder-name"] * 5))
    folder.mkdir(parents=True)
    return folder


@pytest.mark.parametrize(
    "command",
    [
        ["--run", "{file}", "--out", "{out}", "--quiet"],
        ["check", "{file}"],
        ["--run", "{file}", "--out", "{out}", "--sweep", "sampler.seed=1..2"],
    ],
    ids=["run", "check", "sweep"],
)
def test_an_error_naming_a_long_path_is_one_line_on_a_pipe(
    tmp_path: Path, capsys, monkeypatch, command
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # rich would take its width from there
    bad = _long_folder(tmp_path) / "random.png"
    bad.write_bytes(NOT_A_PNG)
    argv = [a.format(file=bad, out=tmp_path / "out") for a in command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    line = next((line for line in err.splitlines() if "not a PNG image" in line), "")
    assert str(bad) in line, err  # the whole path and the reason on one line
