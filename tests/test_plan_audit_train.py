"""Capacity-planner audit of `plan train` (2026-12-01, item 2 and item 6's durations): a GPU
count gets the same layout, global batch and cost whether it is asked alone or in a list; the
global batch is the one asked (the ~4M-token default: 1,024 sequences of 4,096 tokens) or that
rounded up to a multiple of dp x micro-batch, which the plan states; a count the batch holds to
fewer data-parallel ranks says so; a count no layout can use within it is a one-line error, not
a plan with a million sequences per step; a run under a day reads in hours, not "0.0 days"."""

from __future__ import annotations

import json

import pytest

import gpumodel as gm
from gpumodel.cli import main

# Llama 2's batch: 4M tokens (4 * 1024 * 1024) of 4,096-token sequences
ASKED = round(4 * 1024 * 1024 / 4096)


def _run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


TRAIN = ["plan", "train", "--model", "llama-2-7b", "--tokens", "1T", "--gpu", "h100"]


def test_a_count_alone_and_in_a_list_get_the_same_plan(capsys):
    """The audit: --gpus 2048 gave tp=1 dp=2048 with the batch doubled to 2,048 sequences
    ($68,308), --gpus 2048,4096 tp=2 dp=1024 for the same count ($79,140)."""
    code, out, _ = _run(capsys, *TRAIN, "--gpus", "2048", "--json")
    alone = json.loads(out)
    code2, out, _ = _run(capsys, *TRAIN, "--gpus", "2048,4096", "--json")
    listed = next(o for o in json.loads(out)["options"] if o["gpus"] == 2048)
    assert code == code2 == 0
    step = alone["step"]
    assert (step["tp"], step["pp"], step["dp"]) == (listed["tp"], listed["pp"], listed["dp"])
    assert step["global_batch"] == listed["global_batch"]
    assert alone["cost_usd"] == pytest.approx(listed["cost_usd"], rel=1e-9)
    assert alone["days"] == pytest.approx(listed["days"], rel=1e-9)
    # the batch is the one asked: no more data-parallel ranks than sequences per step
    assert step["global_batch"] == ASKED and step["dp"] * step["micro_batch"] <= ASKED
    assert step["tp"] * step["pp"] * step["dp"] == 2048
    # and the plan says the batch held the count's data parallelism
    assert any("at most 1,024 data-parallel ranks" in n for n in alone["notes"])
    assert listed["dp_limit"] == ASKED and listed["global_batch_asked"] == ASKED


def test_the_library_plan_and_search_agree_on_every_count():
    """plan_training (one count) and search_training (a list) share one code path."""
    s = gm.search_training("llama-2-7b", "h100", 1e12, gpus=[8, 96, 768, 2048])
    for o in s.options:
        p = gm.plan_training("llama-2-7b", "h100", o.gpus, 1e12)
        assert (p.step.tp, p.step.pp, p.step.dp) == (o.tp, o.pp, o.dp)
        assert p.step.global_batch == o.global_batch and p.days == pytest.approx(o.days)
        # the global batch: the one asked, or the least multiple of dp x micro-batch above it
        per_step = o.dp * p.step.micro_batch
        assert o.global_batch % per_step == 0
        assert ASKED <= o.global_batch < ASKED + per_step


def test_a_rounded_global_batch_is_stated(capsys):
    """768 GPUs of data parallelism cannot split 1,024 sequences evenly: the plan runs the
    least multiple of 768 above it and says so, in the text and in the search's batch column."""
    code, out, _ = _run(capsys, *TRAIN, "--gpus", "768", "--json")
    p = json.loads(out)
    dp, used = p["step"]["dp"], p["step"]["global_batch"]
    assert code == 0 and ASKED % dp != 0 and used == -(-ASKED // dp) * dp
    code, out, _ = _run(capsys, *TRAIN, "--gpus", "768")
    assert code == 0 and f"global batch {used:,} sequences" in out
    assert f"{ASKED:,} rounded up to a multiple of dp x micro-batch = {dp:,}" in out
    code, out, _ = _run(capsys, *TRAIN, "--gpus", "512,768")
    assert code == 0 and f"{used:,}^" in out and "^ rounded up" in out
    # a batch that divides evenly is not said to be rounded
    code, out, _ = _run(capsys, *TRAIN, "--gpus", "512")
    assert code == 0 and "rounded up" not in out
    # the library's plan says it too (the CLI prints the plan's notes)
    lib = gm.plan_training("llama-2-7b", "h100", 768, 1e12)
    assert lib.step.global_batch == used
    assert [n for n in lib.notes if "rounded up" in n] == [
        n for n in p["notes"] if "rounded up" in n] != []


def test_a_count_the_batch_cannot_hold_is_a_one_line_error(capsys):
    """A million GPUs for 1,024 sequences: at most tp 8 (Llama-2-7B's 32 heads) x pp 32 (its
    layers) x dp 1,024 = 262,144 GPUs take part. It printed "0.0 days" with 1,000,000
    sequences per step."""
    spec = gm.get_model("llama-2-7b")
    most = max(t for t in (1, 2, 4, 8) if spec.heads % t == 0) * spec.layers * ASKED
    code, out, err = _run(capsys, *TRAIN, "--gpus", "1000000")
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1
    assert f"{most:,} GPUs" in err and "--global-batch" in err
    with pytest.raises(gm.SpecError, match="global batch of 1,024 sequences"):
        gm.plan_training("llama-2-7b", "h100", 1_000_000, 1e12)


def test_a_given_global_batch_is_never_changed(capsys):
    code, out, _ = _run(capsys, *TRAIN, "--gpus", "4096", "--global-batch", "4096", "--json")
    p = json.loads(out)
    assert code == 0 and p["step"]["global_batch"] == 4096
    assert not any("rounded up" in n for n in p["notes"])


def test_a_run_under_a_day_reads_in_hours(capsys):
    """1B tokens on 64 H100s take hours: the headline says hours (days x 24, by hand from
    --json), never "0.0 days"; the search table and its answer too."""
    args = ["plan", "train", "--model", "tinyllama-1.1b", "--tokens", "1e9", "--gpu", "h100"]
    code, out, _ = _run(capsys, *args, "--gpus", "64", "--json")
    days = json.loads(out)["days"]
    assert code == 0 and days < 1
    code, out, _ = _run(capsys, *args, "--gpus", "64")
    head = out.splitlines()[0]
    hours = days * 24
    unit = f"{hours:.1f} hours" if hours >= 1 else f"{hours * 60:.1f} minutes"
    assert code == 0 and unit in head and "0.0 days" not in out
    code, out, _ = _run(capsys, *args, "--gpus", "8,64", "--days", "1")
    assert code == 0 and "0.0 days" not in out and unit in out
    lines = out.splitlines()
    header = lines[next(i for i, line in enumerate(lines) if line.startswith("--")) - 1].split()
    assert "time" in header and "days" not in header  # a time column, each cell with its unit


@pytest.mark.parametrize(("days", "text"), [(12.34, "12.3 days"), (1.0, "1.0 days"),
                                            (0.5, "12.0 hours"), (1 / 24 / 2, "30.0 minutes"),
                                            (10 / 86400, "10.0 seconds")])  # fmt: skip
def test_format_duration(days, text):
    from gpumodel.units import format_duration

    assert format_duration(days) == text
