"""`app serve` end to end: ComfyUI's example client (websocket + POST /prompt + /history + /view) against a
server on a free loopback port, running ComfyUI's default graph aimed at the built-in demo model.

What a user checks: the messages ComfyUI's clients follow arrive in order and end with `executing` /
`node: null`; the picture fetched through `/history` + `/view` is the one `app --run` makes of the same
imported workflow; the run is in the editor's history file; a second request reuses the loaded model; a run
that fails is reported to its client and the server carries on.
"""

from __future__ import annotations

import json
import time
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


@pytest.mark.slow  # ~16 s: the first diffusion run of the session, then the same through `app --run`
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
        assert result["ok"] and result["run"]["nodes"]["save_image"]["status"] == "ran"
        (image,) = result["outputs"]["save_image"]["images"]
        assert (options.out_dir / image["filename"]).is_file()
        loads = result["memory"]["events"]["LoadEvent"]
        assert {e["component"] for e in loads} >= {"unet", "vae"}, loads
        assert result["memory"]["peak_host_rss"] > 0


def test_interrupt_priorities_and_delete_while_a_run_is_in_flight(options: ServeOptions) -> None:
    """A long run: two more prompts queue behind it (`front` first), one is deleted, then the running one
    is interrupted: it ends with `execution_interrupted` and the next one runs."""
    seen: dict[str, object] = {}

    def during(message: dict) -> None:
        if message["type"] != "progress" or "queue" in seen:
            return
        for pid, front in (("later", False), ("urgent", True), ("dropped", False)):
            body = {"prompt": comfy_demo_prompt(steps=1), "prompt_id": pid, "client_id": "c", "front": front}
            assert http(server.base, "/prompt", json.dumps(body).encode())[0] == 200
        seen["queue"] = json.loads(http(server.base, "/queue")[1])
        assert http(server.base, "/queue", json.dumps({"delete": ["dropped"]}).encode())[0] == 200
        seen["after_delete"] = [row[1] for row in json.loads(http(server.base, "/queue")[1])["queue_pending"]]
        assert http(server.base, "/interrupt", b"")[0] == 200

    with run_server(options) as server:
        messages = follow_prompt(server.base, comfy_demo_prompt(steps=1000), "c", "long", on_message=during)
        kinds = [m["type"] for m in messages]
        assert "execution_interrupted" in kinds and "execution_success" not in kinds
        queue = seen["queue"]
        assert [row[1] for row in queue["queue_running"]] == ["long"]
        assert [row[1] for row in queue["queue_pending"]] == ["urgent", "later", "dropped"]
        assert seen["after_delete"] == ["urgent", "later"]
        steps = [m["data"]["value"] for m in messages if m["type"] == "progress"]
        assert max(steps) < 1000  # stopped, not run to the end
        # The queued ones still run, urgent first; the deleted one never does.
        for _ in range(600):
            history = json.loads(http(server.base, "/history")[1])
            if {"urgent", "later"} <= set(history):
                break
            time.sleep(0.1)
        assert list(history) == ["long", "urgent", "later"]
        assert history["long"]["status"]["status_str"] == "interrupted"
        assert history["later"]["status"]["status_str"] == "success"


def test_an_uploaded_picture_is_what_a_loadimage_reads(options: ServeOptions, tmp_path: Path) -> None:
    picture = BytesIO()
    Image.new("RGB", (16, 8), (12, 200, 40)).save(picture, format="PNG")
    boundary = "nodeloomtestboundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="pic.png"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        + picture.getvalue()
        + f"\r\n--{boundary}--\r\n".encode()
    )
    prompt = {
        "1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
        "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "copy"}},
    }
    with run_server(options) as server:
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        status, reply = http(server.base, "/upload/image", body, headers)
        assert status == 200 and json.loads(reply)["name"] == "pic.png"
        messages = follow_prompt(server.base, prompt, "c", "copy-run")
        assert "execution_success" in [m["type"] for m in messages], messages
        (saved,) = _images(server.base, "copy-run")["2"]
    with Image.open(BytesIO(saved)) as got:
        assert got.convert("RGB").tobytes() == Image.open(picture).convert("RGB").tobytes()


@pytest.mark.slow  # ~10 s: a fresh interpreter imports torch and the node types
def test_app_serve_starts_answers_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(repo)}
    command = [
        sys.executable,
        "-m",
        "app.main",
        "serve",
        "--port",
        "0",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "o"),
    ]
    process = subprocess.Popen(
        [*command, "--input-dir", str(tmp_path / "i")],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = ""
        for line in process.stderr:  # type: ignore[union-attr]
            if line.startswith("serving on "):
                break
        base = line.split()[2]
        status, body = http(base, "/queue")
        assert status == 200 and json.loads(body) == {"queue_running": [], "queue_pending": []}
        status, body = http(base, "/prompt", json.dumps({"prompt": comfy_demo_prompt(steps=1)}).encode())
        assert status == 200 and json.loads(body)["number"] == 0
    finally:
        process.send_signal(signal.SIGINT)
        rest = process.communicate(timeout=120)[1]
    assert process.returncode == 0, rest
    assert "Traceback" not in rest
