"""`app serve` driven by a client written as ComfyUI's `script_examples/websockets_api_example.py` is:
`websocket-client`'s `WebSocket` on `/ws?clientId=`, urllib for `POST /prompt`, `/history/{id}` and `/view`.

What a user checks: their existing ComfyUI script, pointed at this server, gets the picture `app --run`
makes of the same graph.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
import uuid
from io import BytesIO
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.main import main
from app.server.options import ServeOptions
from memory.config import MemoryConfig
from pipelines.models_library import ModelsLibrary
from tests.server_support import comfy_demo_prompt, run_server

websocket = pytest.importorskip("websocket")  # websocket-client, the example's own dependency


class ExampleClient:
    """The example's functions, kept as it writes them (server_address, client_id, urllib, ws.recv)."""

    def __init__(self, server_address: str) -> None:
        self.server_address = server_address
        self.client_id = str(uuid.uuid4())

    def queue_prompt(self, prompt: dict, prompt_id: str) -> None:
        p = {"prompt": prompt, "client_id": self.client_id, "prompt_id": prompt_id}
        data = json.dumps(p).encode("utf-8")
        req = urllib.request.Request(f"http://{self.server_address}/prompt", data=data)
        urllib.request.urlopen(req).read()

    def get_image(self, filename: str, subfolder: str, folder_type: str) -> bytes:
        data = {"filename": filename, "subfolder": subfolder, "type": folder_type}
        url_values = urllib.parse.urlencode(data)
        with urllib.request.urlopen(f"http://{self.server_address}/view?{url_values}") as response:
            return response.read()

    def get_history(self, prompt_id: str) -> dict:
        with urllib.request.urlopen(f"http://{self.server_address}/history/{prompt_id}") as response:
            return json.loads(response.read())

    def get_images(self, ws: websocket.WebSocket, prompt: dict) -> tuple[dict, list[str]]:
        prompt_id = str(uuid.uuid4())
        self.queue_prompt(prompt, prompt_id)
        kinds = []
        output_images: dict[str, list[bytes]] = {}
        while True:
            out = ws.recv()
            if isinstance(out, str):
                message = json.loads(out)
                kinds.append(message["type"])
                if message["type"] == "executing":
                    data = message["data"]
                    if data["node"] is None and data["prompt_id"] == prompt_id:
                        break  # Execution is done
            else:
                continue  # previews are binary data

        history = self.get_history(prompt_id)[prompt_id]
        for node_id in history["outputs"]:
            node_output = history["outputs"][node_id]
            images_output = []
            if "images" in node_output:
                for image in node_output["images"]:
                    images_output.append(self.get_image(image["filename"], image["subfolder"], image["type"]))
            output_images[node_id] = images_output
        return output_images, kinds


@pytest.mark.slow  # ~10-20 s: a diffusion run through the server, then the same through `app --run`
def test_comfyuis_websocket_example_gets_the_picture_app_run_makes(tmp_path: Path) -> None:
    options = ServeOptions(
        out_dir=tmp_path / "out",
        input_dir=tmp_path / "input",
        memory=MemoryConfig(device="cpu", data_dir=tmp_path / "memory-data"),
        library=ModelsLibrary([]),
    )
    prompt = comfy_demo_prompt()
    with run_server(options) as server:
        client = ExampleClient(server.base.removeprefix("http://"))
        ws = websocket.WebSocket()
        ws.connect(f"ws://{client.server_address}/ws?clientId={client.client_id}")
        try:
            images, kinds = client.get_images(ws, prompt)
        finally:
            ws.close()
    assert kinds[0] == "status" and "execution_success" in kinds and kinds[-1] == "executing"
    (served,) = images["9"]

    source = tmp_path / "prompt.json"
    source.write_text(json.dumps(prompt))
    out = tmp_path / "cli-out"
    assert main(["--run", str(source), "--out", str(out), "--quiet", "--device", "cpu"]) == 0
    (made,) = out.glob("SD1.5_*.png")
    with Image.open(BytesIO(served)) as a, Image.open(made) as b:
        assert a.size == b.size
        diff = np.abs(np.asarray(a.convert("RGB"), np.int16) - np.asarray(b.convert("RGB"), np.int16))
    # Same graph, seed, kernels and machine: the same picture; 1/255 allows a rounding step, nothing more.
    assert diff.max() <= 1, diff.max()
