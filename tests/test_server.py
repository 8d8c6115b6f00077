"""`app serve` end to end: ComfyUI's example client (websocket + POST /prompt + /history + /view) against a
server on a free loopback port, running ComfyUI's default graph aimed at the built-in demo model.

What a user checks: the messages ComfyUI's clients follow arrive in order and end with `executing` /
`node: null`; the picture fetched through `/history` + `/view` is the one `app --run` makes of the same
imported workflow; the run is in the editor's history file; a second request reuses the loaded model; a run
that fails is reported to its client and the server carries on.
"""

from __future__ import annotations

import json
import urllib.parse
import uuid
from io import BytesIO
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.history_file import read_history
from app.main import main
from app.server.options import ServeOptions
from memory.config import MemoryConfig
from pipelines.models_library import ModelsLibrary
from tests.server_support import comfy_demo_prompt, follow_prompt, http, run_server


@pytest.fixture
def options(tmp_path: Path) -> ServeOptions:
    models = tmp_path / "models" / "checkpoints"
    models.mkdir(parents=True)
    (models / "broken.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage")
    return ServeOptions(
        out_dir=tmp_path / "out",
        input_dir=tmp_path / "input",
        memory=MemoryConfig(device="cpu", data_dir=tmp_path / "memory-data"),
        library=ModelsLibrary([tmp_path / "models"]),
    )


def _images(base: str, prompt_id: str) -> dict[str, list[bytes]]:
    """The example's get_images: every picture of every node, through /history then /view."""
    status, body = http(base, f"/history/{prompt_id}")
    assert status == 200
    history = json.loads(body)[prompt_id]
    out = {}
    for node_id, node_output in history["outputs"].items():
        out[node_id] = []
        for image in node_output.get("images", []):
            status, data = http(base, "/view?" + urllib.parse.urlencode(image))
            assert status == 200, data
            out[node_id].append(data)
    return out


def test_comfyui_example_client_gets_the_picture_app_run_makes(options: ServeOptions, tmp_path: Path) -> None:
    prompt = comfy_demo_prompt()
    with run_server(options) as server:
        pid = str(uuid.uuid4())
        messages = follow_prompt(server.base, prompt, "client-1", pid)
        kinds = [m["type"] for m in messages]
        assert kinds[0] == "status" and messages[0]["data"]["sid"] == "client-1"
        order = [k for k in kinds if k != "status"]
        assert order[:2] == ["execution_start", "execution_cached"]
        assert order[-2:] == ["execution_success", "executing"]
        executing = [m["data"]["node"] for m in messages if m["type"] == "executing"]
        assert executing[-1] is None and executing.index("3") < executing.index("8") < executing.index("9")
        steps = [m["data"] for m in messages if m["type"] == "progress"]
        assert [(s["value"], s["max"], s["node"]) for s in steps] == [(i, 4, "3") for i in range(1, 5)]
        (executed,) = [m["data"] for m in messages if m["type"] == "executed"]
        assert executed["node"] == "9" and executed["output"]["images"][0]["type"] == "output"
        pictures = _images(server.base, pid)

        # A second request with another seed: the loaded model and both prompts come from the cache.
        prompt["3"]["inputs"]["seed"] = 6
        again = follow_prompt(server.base, prompt, "client-1", "second")
        (cached,) = [m["data"]["nodes"] for m in again if m["type"] == "execution_cached"]
        assert {"4", "6", "7"} <= set(cached)
        assert "execution_success" in [m["type"] for m in again]

    (served,) = pictures["9"]
    source = tmp_path / "prompt.json"
    source.write_text(json.dumps(comfy_demo_prompt()))
    out = tmp_path / "cli-out"
    assert main(["--run", str(source), "--out", str(out), "--quiet", "--device", "cpu"]) == 0
    (made,) = out.glob("SD1.5_*.png")
    with Image.open(BytesIO(served)) as a, Image.open(made) as b:
        diff = np.abs(np.asarray(a.convert("RGB"), np.int16) - np.asarray(b.convert("RGB"), np.int16))
    # Same graph, seed, kernels and machine: the same picture; 1/255 allows a rounding step, nothing more.
    assert diff.max() <= 1, diff.max()

    entries = read_history(options.out_dir)  # the editor's history panel reads this file
    assert len(entries) == 2 and all(Path(e.files[0]).parent == options.out_dir for e in entries)
    assert entries[0].seeds == {"3.seed": 5} and entries[1].seeds == {"3.seed": 6}


def test_a_failed_run_is_reported_and_the_server_carries_on(options: ServeOptions) -> None:
    broken = comfy_demo_prompt()
    broken["4"]["inputs"]["ckpt_name"] = "broken.safetensors"
    with run_server(options) as server:
        messages = follow_prompt(server.base, broken, "c", "bad-run")
        (error,) = [m["data"] for m in messages if m["type"] == "execution_error"]
        assert error["node_id"] == "4" and error["exception_message"] and error["traceback"] == []
        assert "Traceback" not in json.dumps(messages)
        status, body = http(server.base, "/history/bad-run")
        assert json.loads(body)["bad-run"]["status"]["status_str"] == "error"
        # Still serving: the queue answers and the next request runs.
        assert http(server.base, "/queue")[0] == 200
        good = follow_prompt(server.base, comfy_demo_prompt(steps=1), "c", "good-run")
        assert "execution_success" in [m["type"] for m in good]


def test_run_takes_a_nodeloom_workflow_and_reports_its_memory(options: ServeOptions, tmp_path: Path) -> None:
    source = tmp_path / "prompt.json"
    source.write_text(json.dumps(comfy_demo_prompt(steps=1)))
    workflow = tmp_path / "wf.json"
    assert main(["import", str(source), "-o", str(workflow)]) == 0
    with run_server(options) as server:
        body = json.dumps({"workflow": json.loads(workflow.read_text())}).encode()
        status, reply = http(server.base, "/run", body)
        assert status == 200, reply
        result = json.loads(reply)
        assert result["ok"] and result["run"]["nodes"]["9"]["status"] == "ran"
        (image,) = result["outputs"]["9"]["images"]
        assert (options.out_dir / image["filename"]).is_file()
        loads = result["memory"]["events"]["LoadEvent"]
        assert {e["component"] for e in loads} >= {"unet", "vae"}, loads
        assert result["memory"]["peak_host_rss"] > 0
