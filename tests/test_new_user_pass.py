"""What a new user's sweep of the commands found on 2026-12-01 (nineteenth session), each held:
wrong numbers (fp32 activations at 2 bytes, selective recompute charged beside a fused
attention kernel), options a mode ignores, misleading errors, JSON cut by a bad row, numbers
cut in tables."""

from __future__ import annotations

import json

import pytest

import gpumodel as gm
from gpumodel.cli import main
from gpumodel.cli.tables import Table, render
from gpumodel.errors import SpecError
from gpumodel.llm.memory import activation_bytes_per_layer, memory


def test_fp32_activations_take_four_bytes_a_tensor():
    """Korthikanti et al.'s 34 sbh: 32 bytes of 16-bit tensors and 2 of 1-byte dropout
    masks; fp32 tensors double the 32: 66 sbh. TinyLlama (22 layers, hidden 2048), batch 2 x
    2048 tokens: sbh = 2048 x 2 x 2048."""
    sbh = 2048 * 2 * 2048
    assert activation_bytes_per_layer(2048, 2, 2048, 32) == 34 * sbh
    assert activation_bytes_per_layer(2048, 2, 2048, 32, element_bytes=4.0) == 66 * sbh
    # tensor parallel without sequence parallel: 10 + 24/t (8 + 2 masks, 24 tensors)
    assert activation_bytes_per_layer(2048, 2, 2048, 32, 4, element_bytes=4.0) == (
        (16 + 2 + 48 / 4) * sbh)
    kw = dict(batch=2, seq=2048, train=True)
    fp32 = memory("tinyllama-1.1b", "h100", dtype="fp32", policy="fp32", **kw)
    bf16 = memory("tinyllama-1.1b", "h100", policy="bf16", **kw)
    logits = 4.0 * 2 * 2048 * 32000  # fp32 logits either way
    assert fp32.activations_bytes == pytest.approx(22 * 66 * sbh + logits)
    assert bf16.activations_bytes == pytest.approx(22 * 34 * sbh + logits)
    # an fp32 model without a policy keeps no second fp32 copy: AdamW's two moments, 8 B
    plain = memory("tinyllama-1.1b", "h100", dtype="fp32", **kw)
    assert plain.optimizer_bytes == pytest.approx(fp32.optimizer_bytes)
    assert plain.activations_bytes == pytest.approx(fp32.activations_bytes)


def test_selective_recompute_adds_nothing_beside_a_fused_kernel():
    """A fused kernel keeps no score matrix and its backward recomputes the scores itself:
    selective recompute (Korthikanti et al.) has nothing left to do. The unfused math path's
    attention ops are done again."""
    kw = dict(micro_batch=2, seq=2048, zero=1)
    for attention in ("flash", "cudnn"):
        sel = gm.predict_training_step("llama-2-7b", "h100", 8, recompute="selective",
                                       attention=attention, **kw)  # fmt: skip
        none = gm.predict_training_step("llama-2-7b", "h100", 8, recompute="none",
                                        attention=attention, **kw)  # fmt: skip
        assert sel.time_s == none.time_s
    kw["seq"] = 1024
    sel = gm.predict_training_step("gpt2", "h100", 8, recompute="selective", attention="naive",
                                   **kw)  # fmt: skip
    none = gm.predict_training_step("gpt2", "h100", 8, recompute="none", attention="naive", **kw)
    assert sel.time_s > none.time_s


@pytest.mark.parametrize(("mode", "flag"), [
    ("inference", ["--policy", "amp"]), ("inference", ["--zero", "3"]),
    ("inference", ["--recompute", "full"]), ("inference", ["--fusion", "unfused"]),
    ("training", ["--runtime", "hf-eager"]), ("training", ["--phase", "prefill"]),
    ("training", ["--new-shapes"]),
])  # fmt: skip
def test_a_sweep_refuses_the_other_modes_options(capsys, mode, flag):
    assert main(["sweep-llm", "--model", "gpt2", "--gpu", "h100", "--mode", mode, *flag]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"this sweep is --mode {mode}" in err


def test_host_options_of_an_eager_step_refused_on_a_graph(capsys):
    with pytest.raises(SpecError, match="replays a graph"):
        gm.predict_inference("llama-3-8b", "h100", batch=1, new_shapes=True)
    with pytest.raises(SpecError, match="replays a graph"):
        gm.predict_inference("llama-3-8b", "h100", batch=1, host_per_kernel_s=5e-5)
    assert main(["infer", "--model", "llama-3-8b", "--gpu", "h100", "--host-us", "50"]) == 2
    assert main(["infer", "--model", "llama-3-8b", "--gpu", "h100", "--host-us", "50",
                 "--runtime", "hf-eager"]) == 0  # fmt: skip


@pytest.mark.parametrize(("policy", "dtype"), [("bf16", "fp16"), ("bf16", "fp32"),
                                               ("amp", "fp32"), ("mixed", "tf32")])  # fmt: skip
def test_a_policy_and_a_dtype_that_contradict_it(policy, dtype):
    with pytest.raises(SpecError, match=f"policy {policy}"):
        gm.predict_training_step("gpt2", "h100", 1, policy=policy, dtype=dtype)


def test_a_file_that_is_no_calibration_says_so(capsys, tmp_path):
    for text in ("[1, 2]\n", "{}\n", "hello\n"):
        path = tmp_path / "c.yaml"
        path.write_text(text)
        assert main(["predict", "gemm", "--m", "8", "--n", "8", "--k", "8", "--gpu", "h100",
                     "--calibration", str(path)]) == 2  # fmt: skip
        assert "not a gpumodel calibration" in capsys.readouterr().err


def test_another_gpus_calibration_file_is_carried_by_its_path(capsys):
    path = "validation/results/h200-sxm/calibration.yaml"
    assert main(["predict", "gemm", "--m", "8", "--n", "8", "--k", "8", "--gpu", "h100",
                 "--calibration", path]) == 2  # fmt: skip
    assert f"--calibration-from {path}" in capsys.readouterr().err


def test_batch_json_stays_valid_when_a_row_is_bad(capsys, tmp_path):
    rows = tmp_path / "ops.csv"
    rows.write_text("op,m,n,k\ngemm,64,64,64\ngemm,-1,2,3\n")
    assert main(["batch", str(rows), "--gpu", "h100", "--json"]) == 2
    out = capsys.readouterr()
    assert len(json.loads(out.out)) == 1  # the row before the bad one
    assert "ops.csv:3" in out.err


def test_tables_cut_labels_never_numbers():
    t = Table(title="", columns=["GPU", "GPUs", "calibration"], right={"GPUs"})
    t.add("h100-sxm (best)", "53406363777", "measured 2026-11-27")
    lines = render(t, width=30).splitlines()
    assert "53406363777" in lines[-1]
    assert lines[-1].startswith("h100-sxm")  # the row's name cut last


def test_serve_and_sweep_say_which_tokens_a_dollar_figure_counts(capsys):
    assert main(["plan", "serve", "--model", "llama-3-8b", "--gpu", "h100", "--rate", "5/s"]) == 0
    assert "prompt and output" in " ".join(capsys.readouterr().out.split())
    assert main(["sweep-llm", "--model", "llama-3-8b", "--gpu", "h100", "--batch", "1,8"]) == 0
    assert "per million generated tokens" in " ".join(capsys.readouterr().out.split())
