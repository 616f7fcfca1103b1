"""LLM and explain commands: exit codes, JSON, one-line errors."""

from __future__ import annotations

import importlib.util
import json

import pytest

import gpumodel.cli.explain
import gpumodel.cli.llm  # noqa: F401
from gpumodel.cli import main


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_infer_json(capsys):
    code, out, _ = run(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100", "--phase",
                       "decode", "--batch", "8", "--context", "2048", "--json",
                       "--calibration", "none")  # fmt: skip
    data = json.loads(out)
    assert code == 0 and data["batch"] == 8 and data["time_per_output_token_s"] > 0
    assert {"step_time_s", "tokens_per_s", "kv_cache_bytes", "breakdown", "kernels_per_step",
            "host_overhead_s"} <= set(data)  # fmt: skip


def test_infer_text_and_runtimes(capsys):
    code, out, _ = run(capsys, "infer", "--model", "llama-2-7b", "--runtime", "graph",
                       "--phase", "prefill", "--seq", "512", "--calibration", "none")  # fmt: skip
    assert code == 0 and "TTFT" in out and "graph" in out


def test_memory_train(capsys):
    code, out, _ = run(capsys, "memory", "--model", "llama-2-70b", "--gpu", "h100", "--seq",
                       "4096", "--train", "--zero", "3", "--dp", "8", "--tp", "8",
                       "--recompute", "full", "--json")  # fmt: skip
    data = json.loads(out)
    assert code == 0 and data["fits"] and data["zero"] == 3 and data["max_batch"] >= 1


def test_plan_train(capsys):
    code, out, _ = run(capsys, "plan", "train", "--model", "llama-2-70b", "--tokens", "2T",
                       "--gpu", "h100", "--gpus", "1024", "--mfu", "0.4", "--price", "2.5",
                       "--json")  # fmt: skip
    data = json.loads(out)
    assert code == 0 and data["tokens"] == 2e12
    assert data["cost_usd"] == pytest.approx(data["days"] * 24 * 1024 * 2.5)


def test_plan_serve(capsys):
    code, out, _ = run(capsys, "plan", "serve", "--model", "llama-3-8b", "--gpu", "l4,a100,h100",
                       "--prompt", "1024", "--output", "256", "--rate", "50/s",
                       "--calibration", "none")  # fmt: skip
    assert code == 0 and "best buy" in out and "$ per 1M tokens" in out


def test_models_and_explain(capsys):
    assert run(capsys, "models", "list")[0] == 0
    code, out, _ = run(capsys, "models", "show", "llama-2-7b", "--json")
    assert code == 0 and json.loads(out)["params"] == 6_738_415_616
    code, out, _ = run(capsys, "explain", "decode", "--gpu", "h100", "--model", "llama-3-8b")
    assert code == 0 and "B*" in out and "332" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["infer", "--model", "llama-3-9b"], "unknown model 'llama-3-9b'"),
        (["infer", "--model", "llama-3-8b", "--phase", "train"], "--phase: 'train'"),
        (["infer", "--model", "llama-3-8b", "--batch", "0"], "--batch must be at least 1"),
        (["plan", "train", "--model", "llama-3-405b", "--tokens", "1e9", "--gpus", "8"], "needs"),
        (["plan", "serve", "--model", "llama-3-8b", "--rate", "fast"], "--rate"),
        (
            ["plan", "train", "--model", "llama-2-7b", "--tokens", "lots", "--gpus", "8"],
            "expected a count",
        ),
        (["explain", "conv"], "unknown topic 'conv'"),
        (["infer", "--model", "llama-3-8b", "--runtime", "hf-eager", "--tp", "16"],
         "8 K/V heads, tp=16 does not divide them"),
        (["infer", "--model", "llama-3-8b", "--tp", "-2"], "--tp must be at least 1"),
    ],
)
def test_errors_are_one_line_exit_2(capsys, args, message):
    code, _, err = run(capsys, *args)
    assert code == 2 and message in err and err.count("\n") == 1


def test_plot_needs_matplotlib_or_writes(capsys, tmp_path):
    path = tmp_path / "ops.png"
    code, _, err = run(capsys, "infer", "--model", "gpt2-small", "--plot", str(path),
                       "--calibration", "none")  # fmt: skip
    if importlib.util.find_spec("matplotlib") is None:
        assert code == 2 and "pip install 'gpumodel[plot]'" in err
    else:
        assert code == 0 and path.stat().st_size > 0


def test_memory_refuses_training_flags_without_train_and_hints_what_fits(capsys):
    """--zero/--dp shard training states: without --train they were dropped silently. A model
    that does not fit says what would (as infer does), not only 'largest batch 0'."""
    code, _, err = run(capsys, "memory", "--model", "llama-3-8b", "--dp", "8", "--zero", "3")
    assert code == 2 and "add --train" in err
    # activation options were dropped the same way (the total unchanged, exit 0)
    for opt in (["--recompute", "full"], ["--fusion", "unfused"], ["--sequence-parallel"]):
        code, _, err = run(capsys, "memory", "--model", "llama-3-8b", *opt)
        assert code == 2 and f"{opt[0]} shapes training activations: add --train" in err
    code, out, _ = run(capsys, "memory", "--model", "llama-3-70b", "--gpu", "h100")
    # 70.6B bf16 weights are 141 GB: two H100s (tp 2) hold 70.6 GB each plus the KV cache
    assert code == 0 and "fits: tp >= 2" in out
    code, out, _ = run(capsys, "memory", "--model", "llama-3-8b", "--context", "8192")
    assert code == 0 and "context 8192" in out  # infer's name for it works here too


def test_experts_on_a_dense_model_and_a_gpu_list_where_one_is_asked_are_errors(capsys):
    code, _, err = run(capsys, "infer", "--model", "llama-3-8b", "--experts", "loop")
    assert code == 2 and "dense model" in err
    code, _, err = run(capsys, "plan", "train", "--model", "llama-2-7b", "--tokens", "1T",
                       "--gpu", "h100,a100", "--gpus", "64")  # fmt: skip
    assert code == 2 and "one GPU id here, got the list 'h100,a100'" in err


def test_infer_tp_alone_is_one_replica_and_plan_serve_names_a_gpu_once(capsys):
    """--tp 2 with no --gpus was 'gpus (1) must be a multiple of tp (2)': the help says --tp
    defaults to --gpus, so --gpus defaults to --tp. A GPU named twice in plan serve was two
    rows, both 'best'."""
    code, out, _ = run(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100", "--tp", "2")
    assert code == 0 and "tp=2" in out and "over 1 replica(s)" in out
    code, out, _ = run(capsys, "plan", "serve", "--model", "llama-3-8b", "--gpu",
                       "h100,h100-sxm,h100", "--json")  # fmt: skip
    options = json.loads(out)["options"]
    assert code == 0 and [o["gpu"] for o in options] == ["h100-sxm"]
