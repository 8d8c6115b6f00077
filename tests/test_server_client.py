"""`app.server.client.ServerClient` against a served demo run: the messages of its own run arrive as they
happen, the reply carries the outputs, `fetch` reads a picture back, and a refusal is a ServerError with the
server's message (what the editor's "Connect to server" will show)."""

from __future__ import annotations

import json
from io import BytesIO
from pathlib import Path

import pytest
from PIL import Image

from app.main import main
from app.server.client import ServerClient, ServerError
from app.server.options import ServeOptions
from memory.config import MemoryConfig
from tests.server_support import comfy_demo_prompt, run_server

TOKEN = "client-test-token-0123456789"


def test_the_client_runs_a_workflow_and_follows_its_messages(tmp_path: Path) -> None:
    source = tmp_path / "prompt.json"
    source.write_text(json.dumps(comfy_demo_prompt(steps=2)))
    workflow = tmp_path / "wf.json"
    assert main(["import", str(source), "-o", str(workflow)]) == 0
    options = ServeOptions(
        out_dir=tmp_path / "out",
        input_dir=tmp_path / "in",
        memory=MemoryConfig(device="cpu", data_dir=tmp_path / "memory-data"),
        token=TOKEN,
    )
    with run_server(options) as server:
        seen: list[dict] = []
        client = ServerClient(server.base, TOKEN)
        result = client.run(json.loads(workflow.read_text()), seen.append)
        assert result["ok"], result
        kinds = [m["type"] for m in seen]
        assert "execution_start" in kinds and [
            m["data"]["value"] for m in seen if m["type"] == "progress"
        ] == [1, 2]
        (image,) = result["outputs"]["save_image"]["images"]
        with Image.open(BytesIO(client.fetch(image))) as picture:
            assert picture.size == (64, 64)
        with pytest.raises(ServerError, match="absolute path") as refused:
            bad = json.loads(workflow.read_text())
            bad["nodes"]["load_checkpoint"]["params"]["path"] = "/etc/passwd"
            client.run(bad)
        assert refused.value.status == 400
        with pytest.raises(ServerError) as unauthorized:
            ServerClient(server.base).request("/queue")
        assert unauthorized.value.status == 401
