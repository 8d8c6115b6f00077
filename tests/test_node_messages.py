"""A node's failure reads as a sentence naming the node (and its file field), never an exception class name.

One wording (`nodes.events.failure_text`) serves the CLI, the editor's log and status bar, sweep rows and the
run error in the report; the class stays in the report's `error.type` for debugging.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from app.main import main
from nodes.events import NodeFailed, failure_text
from nodes.executor import NodeRunError
from nodes.failures import exception_message


def test_the_failure_text_names_the_node_and_not_the_class() -> None:
    event = NodeFailed("unet", "LoadDenoiser", "UnsafeFormatError", "x.safetensors: a pickle", 0.1)
    assert event.text == "node 'unet' (LoadDenoiser) failed: x.safetensors: a pickle"
    assert (
        str(NodeRunError("unet", "LoadDenoiser", "UnsafeFormatError", "x.safetensors: a pickle"))
        == event.text
    )
    assert failure_text("a", "B", "c") == "node 'a' (B) failed: c"


def test_exceptions_that_say_nothing_readable_still_give_a_phrase() -> None:
    assert exception_message(KeyError("unet.conv_in")) == "no entry 'unet.conv_in'"
    assert exception_message(RuntimeError()) == "an internal error with no message (RuntimeError)"
    assert exception_message(ValueError("field 'steps': too big")) == "field 'steps': too big"


def test_a_refused_pickle_reads_as_a_sentence_naming_node_and_field(tmp_path: Path, capsys) -> None:
    model = tmp_path / "unet.safetensors"
    torch.save({"w": torch.zeros(2)}, model)  # a torch zip under a safetensors name
    wf = {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {"unet": {"type": "LoadDenoiser", "params": {"path": str(model)}, "inputs": {}}},
    }
    (tmp_path / "wf.json").write_text(json.dumps(wf))
    report = tmp_path / "report.json"
    argv = [
        "--run",
        str(tmp_path / "wf.json"),
        "--out",
        str(tmp_path / "out"),
        "--quiet",
        "--report",
        str(report),
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("run failed: node 'unet' (LoadDenoiser) failed: field 'path': unet.safetensors: ")
    assert "UnsafeFormatError" not in err and "Error:" not in err
    assert len(err.splitlines()) == 1  # quiet: one line, never wrapped
    run = json.loads(report.read_text())["runs"][0]
    assert run["nodes"]["unet"]["error"]["type"] == "UnsafeFormatError"  # kept for whoever debugs
    assert run["error"] == err.removeprefix("run failed: ")
