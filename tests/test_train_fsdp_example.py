"""``examples/train_fsdp.py`` on two CPU ranks (gloo): Hugging Face's
LlamaForCausalLM (tiny) under FSDP2, attention and MLP marked, mode="budget",
against plain Inductor. The example's ``--check`` compares every rank's
gradient shards with plain Inductor's at every step and exits 1 on a
difference; the rows are read back from its ``--json``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_llama_under_fsdp2_trains_as_plain_inductor_and_reports_each_rank(tmp_path):
    out = tmp_path / "rows.json"
    env = dict(os.environ, OFFLOAD_PASS_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port()),
         str(ROOT / "examples/train_fsdp.py"), "--device", "cpu", "--model", "llama", "--check", "--steps", "2",
         "--mode", "budget", "--memory-budget", "0.6", "--ckpt", "--json", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "gradient check passed: every rank, 2 steps, equal to plain Inductor" in done.stdout
    rows = json.loads(out.read_text())["ranks"]
    assert [r["rank"] for r in rows] == [0, 1]
    for r in rows:
        assert r["grad_failures"] == [] and "oom" not in r
        # Every layer's graph planned, something offloaded in each step, as copied as planned.
        assert r["plans"] >= 2 and r["offloaded_tensors"] > 0 and r["copied_bytes_per_step"] == r["offloaded_bytes"] > 0
        assert r["tokens_per_s"] > 0 and r["step_ms_without"] > 0 and r["step_ms_ckpt"] > 0
    assert rows[0]["offloaded_tensors"] == rows[1]["offloaded_tensors"]  # the same plan on both ranks
