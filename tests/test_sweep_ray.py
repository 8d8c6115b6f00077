"""The Ray backend on a loopback-only local cluster: same pictures as a local sweep at the same thread count
(within one 8-bit level at another), models loaded once per worker, one worker per (fake) GPU. Ray starts
once for the session (~20 s here); skipped without Ray."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
from PIL import Image

from app.main import main

# Integration and parity: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"
# Four jobs (about two per worker, so a later job shows its models stay loaded) of two steps each: what is
# compared (pictures, workers, load counts) does not depend on the counts, and the three sweeps sample a third
# of what six jobs of four steps did.
JOBS = 4
SWEEP = ["--sweep", f"sampler.seed=11..{10 + JOBS}", "--set", "sampler.steps=2", "--threads", "1", "--quiet"]


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    """A private Ray on 127.0.0.1 with 2 CPUs and 2 fake GPUs (Ray hands out GPU ids without a GPU)."""
    from app.batch.cluster import LOOPBACK_ENV, OBJECT_STORE_BYTES

    os.environ.update(LOOPBACK_ENV)  # before the import: Ray reads it into its constants
    ray = pytest.importorskip("ray")
    ray.init(
        address="local",
        num_cpus=2,
        num_gpus=2,
        include_dashboard=False,
        object_store_memory=OBJECT_STORE_BYTES,
        _node_ip_address="127.0.0.1",
        runtime_env={
            "env_vars": {"PYTHONPATH": str(REPO), "NODELOOM_DATA_DIR": os.environ["NODELOOM_DATA_DIR"]}
        },
        log_to_driver=False,
        logging_level="ERROR",
    )
    try:
        yield ray
    finally:
        ray.shutdown()


def _pictures(report: dict) -> dict[int, bytes]:
    out = {}
    for job in report["jobs"]:
        (path,) = job["outputs"]
        with Image.open(path) as image:
            out[job["values"]["sampler.seed"]] = image.tobytes()
    return out


@pytest.mark.slow
def test_two_gpu_workers_make_the_local_pictures_and_load_each_model_once(
    ray_cluster, tmp_path: Path
) -> None:
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert main(["--run", str(TXT2IMG), "--out", str(local)] + SWEEP) == 0
    assert main(["--run", str(TXT2IMG), "--out", str(remote), "--cluster", "ray"] + SWEEP) == 0
    local_report = json.loads((local / "sweep.json").read_text())
    report = json.loads((remote / "sweep.json").read_text())
    assert report["backend"] == "ray" and report["counts"]["ok"] == JOBS
    # The outputs came back to the caller's folder, named by job, bit for bit what a local sweep makes at the
    # same torch thread count (both --threads 1) on the same CPU.
    assert _pictures(report) == _pictures(local_report)
    for job in report["jobs"]:
        assert Path(job["outputs"][0]).parent == remote and f"j{job['index']:03d}" in job["outputs"][0]
    # One worker per GPU, both used, each loading each model once and reporting its own memory.
    workers = report["workers"]
    assert sorted(w["gpus"] for w in workers) == ["0", "1"]
    assert len({w["pid"] for w in workers}) == 2 and os.getpid() not in {w["pid"] for w in workers}
    for worker in workers:
        assert worker["jobs"] >= 1
        assert worker["load_counts"] == {"text_encoder": 1, "unet": 1, "vae": 1}
        assert worker["memory"]["process_peak_rss"] > 0 and worker["images_per_min"] > 0
    assert sum(w["images"] for w in workers) == report["totals"]["images"] == JOBS
    assert (remote / "sweep.html").is_file()
    # Another torch thread count changes how some float32 reductions are chunked, so the pictures may differ
    # by float32 rounding: a saved pixel by at most one 8-bit level, and only rarely (README "Same pictures?").
    other = tmp_path / "local-2-threads"
    assert (
        main(["--run", str(TXT2IMG), "--out", str(other)] + SWEEP[:-3] + ["--threads", "2", "--quiet"]) == 0
    )
    two_threads = _pictures(json.loads((other / "sweep.json").read_text()))
    for seed, picture in _pictures(report).items():
        pixels = np.frombuffer(picture, np.uint8).astype(int) - np.frombuffer(two_threads[seed], np.uint8)
        assert np.abs(pixels).max() <= 1, seed
        assert np.count_nonzero(pixels) <= pixels.size // 100, seed


@pytest.mark.slow
def _listening(child: psutil.Process) -> list[tuple[str, str]]:
    try:  # a short-lived helper process may be gone by the time we ask
        return [
            (child.name(), conn.laddr.ip)
            for conn in child.net_connections(kind="inet")
            if conn.status == psutil.CONN_LISTEN
        ]
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


def test_ray_listens_on_loopback_only(ray_cluster) -> None:
    listening = [pair for child in psutil.Process().children(recursive=True) for pair in _listening(child)]
    assert listening, "Ray's servers should be children of this process"
    assert {ip for _, ip in listening} <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening


def test_cluster_without_ray_says_how_to_get_it(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code = main(["--run", str(TXT2IMG), "--out", str(tmp_path), "--cluster", "ray", "--quiet"])
    assert code == 2
    assert "pip install 'nodeloom[cluster]'" in capsys.readouterr().err


def test_bad_cluster_address_exits_2(tmp_path: Path, capsys) -> None:
    assert main(["--run", str(TXT2IMG), "--out", str(tmp_path), "--cluster", "http://x", "--quiet"]) == 2
    assert "ray://HOST:PORT" in capsys.readouterr().err
