"""Every command that prints a table fits a 100-column terminal (issue #19 item 3): rendered
with COLUMNS=100, no line of its output is wider than 100 characters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpumodel.cli import main

WIDTH = 100
TRACE = Path(__file__).parent / "fixtures" / "traces" / "lm_head_50257.json.gz"

COMMANDS = {
    "predict across GPUs": ["predict", "gemm", "--m", "4096", "--n", "4096", "--k", "4096",
                            "--gpu", "a100,h100,h200,l4,mi300x"],
    "predict one GPU": ["predict", "attention", "--seq", "2048", "--gpu", "h100"],
    "batch": ["batch", "{ops}", "--gpu", "h100"],
    "plan train (search)": ["plan", "train", "--model", "llama-2-7b", "--tokens", "1T",
                            "--gpu", "h100", "--days", "30"],
    "plan train (one count)": ["plan", "train", "--model", "llama-2-7b", "--tokens", "1T",
                               "--gpu", "h100", "--gpus", "64"],
    "plan serve": ["plan", "serve", "--model", "llama-3-8b", "--gpu", "l4,a100,h100,h200,mi300x",
                   "--rate", "50/s"],
    "sweep-llm inference": ["sweep-llm", "--model", "llama-3-8b", "--gpu", "h100,l4",
                            "--batch", "1,8,64", "--context", "1024,8192", "--tp", "1,2"],
    "sweep-llm training": ["sweep-llm", "--model", "llama-2-7b", "--mode", "training",
                           "--gpu", "h100,a100", "--tp", "1,2", "--dp", "8,64",
                           "--tokens", "1T"],
    "infer": ["infer", "--model", "llama-3-8b", "--gpu", "h100", "--batch", "8"],
    "memory": ["memory", "--model", "llama-2-70b", "--gpu", "h100", "--train", "--tp", "8"],
    "allreduce": ["allreduce", "--bytes", "1GB", "--gpus", "8", "--gpu", "h100"],
    "amdahl": ["amdahl", "--parallel-fraction", "0.95", "--gpus", "1,2,4,8,16,64"],
    "dp-step": ["dp-step", "--compute-ms", "300", "--grad-bytes", "28GB", "--gpus", "1,8,64"],
    "systems": ["systems"],
    "occupancy": ["occupancy", "--gpu", "h100", "--threads", "256", "--regs", "64"],
    "roofline": ["roofline", "--gpu", "h100"],
    "specs list": ["specs", "list"],
    "specs show": ["specs", "show", "h100"],
    "models list": ["models", "list"],
    "models show": ["models", "show", "llama-3-8b"],
    "diagnose": ["diagnose", str(TRACE)],
}  # fmt: skip


@pytest.mark.parametrize("name", list(COMMANDS))
def test_table_fits_100_columns(name, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    ops = tmp_path / "ops.jsonl"
    ops.write_text("\n".join(json.dumps(r) for r in (
        {"op": "gemm", "m": 4096, "n": 4096, "k": 4096, "batch": 1024},
        {"op": "relu", "n": 10**9},
        {"op": "attention", "seq": 8192, "heads": 64, "head_dim": 128, "batch": 4},
    )) + "\n")  # fmt: skip
    args = [a.replace("{ops}", str(ops)) for a in COMMANDS[name]]
    code = main(args)
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.strip(), f"{name} printed nothing"
    wide = [line for line in out.splitlines() if len(line) > WIDTH]
    assert not wide, f"{name}: {len(wide)} lines over {WIDTH} columns, e.g. {wide[0]!r}"
