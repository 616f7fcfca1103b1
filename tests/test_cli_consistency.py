"""Rules every CLI command follows the same way (not one check per command): --json with --csv
is refused, --plot creates its directory as --html and --out do, and no command accepts a
context longer than the model's max_context."""

from __future__ import annotations

import pytest

import gpumodel as gm
from gpumodel.cli import command, main
from gpumodel.errors import UnsupportedError
from gpumodel.llm import memory

# one valid invocation of every command that has both --json and --csv
BOTH = {
    ("allreduce",): ["--bytes", "1e6", "--gpus", "8"],
    ("amdahl",): ["--serial-ms", "1", "--parallel-ms", "9"],
    ("batch",): ["ops.jsonl"],  # refused before the file is read
    ("calibrations",): [],
    ("diagnose",): ["tests/fixtures/traces/item_sync.json.gz"],
    ("dp-step",): ["--compute-ms", "100", "--grad-bytes", "1GB"],
    ("models", "list"): [],
    ("occupancy",): ["--gpu", "h100", "--regs", "64", "--threads", "256"],
    ("plan", "serve"): ["--model", "gpt2", "--gpu", "h100", "--prompt", "512", "--output", "128"],
    ("plan", "train"): ["--model", "gpt2", "--gpus", "8", "--tokens", "1e9"],
    ("roofline",): ["--gpu", "h100"],
    ("specs", "list"): [],
    ("sweep-llm",): ["--model", "gpt2", "--gpu", "h100"],
    ("systems",): [],
    ("validate",): [],  # refused before it looks for a GPU
}
RUN_ALONE_TOO = set(BOTH) - {("batch",), ("validate",)}


def _with_both(cmd, path=()):
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _with_both(sub, (*path, name))
    if {"as_json", "as_csv"} <= {p.name for p in getattr(cmd, "params", ())}:
        yield path


def test_every_command_with_json_and_csv_refuses_both(capsys):
    found = {p for p in _with_both(command()) if p[0] != "predict"}
    assert "predict" in command().commands  # its ops are subcommands: gemm below
    assert found == set(BOTH), f"add or remove invocations: {found ^ set(BOTH)}"
    for path, args in [*BOTH.items(), (("predict", "gemm"), ["--m", "64", "--n", "64",
                                                              "--k", "64"])]:  # fmt: skip
        if path in RUN_ALONE_TOO | {("predict", "gemm")}:
            assert main([*path, *args, "--json"]) == 0, path  # valid alone
            capsys.readouterr()
        assert main([*path, *args, "--json", "--csv"]) == 2, path
        assert capsys.readouterr().err.strip() == "error: pass --json or --csv, not both"


def test_plot_creates_its_directory_like_html_and_out(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    target = tmp_path / "new" / "dir" / "memory.svg"
    assert main(["memory", "--model", "gpt2", "--plot", str(target)]) == 0
    assert target.read_bytes().startswith(b"<?xml")


def test_no_command_goes_past_the_models_context(capsys):
    """GPT-2 has 1024 learned positions: a 2048-token step cannot run, in memory as in infer."""
    for args in (["memory", "--model", "gpt2", "--seq", "2048"],
                 ["memory", "--model", "gpt2", "--seq", "2048", "--train"],
                 ["infer", "--model", "gpt2", "--context", "2048"],
                 ["plan", "train", "--model", "gpt2", "--gpus", "8", "--tokens", "1e9",
                  "--seq", "2048"]):  # fmt: skip
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.endswith("exceeds gpt2-small's max_context 1024"), (args, err)
    # the default is the model's own context where it is shorter than 2048
    assert main(["memory", "--model", "gpt2", "--json"]) == 0
    assert memory("gpt2", "h100").seq == 1024
    assert memory("llama-3-8b", "h100").seq == 2048
    with pytest.raises(UnsupportedError, match="seq 2048 exceeds gpt2-small's max_context"):
        gm.predict_training_step("gpt2", "h100", 1, micro_batch=1, global_batch=1, seq=2048)
    with pytest.raises(UnsupportedError, match="prompt \\+ output 1100 exceeds"):
        gm.plan_serving("gpt2", ["h100"], prompt=1000, output=100)
