"""Capacity-planner audit of the headline output (2026-12-01): a decode step of several query
tokens has one TPOT and one tokens/s that agree (item 4); a memory headline tells "needs" from
"has" and writes both in the breakdown's units (item 6); a GPU comparison keeps its row labels
whole (item 7)."""

from __future__ import annotations

import json
import re

import pytest

import gpumodel as gm
import gpumodel.llm
from gpumodel.cli import main
from gpumodel.cli.tables import Table, render_lines


def _run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --- item 4: TPOT and tokens/s of a step of several query tokens -------------------------------


@pytest.mark.parametrize(("batch", "seq"), [(1, 4), (8, 4), (3, 1)])
def test_tpot_and_tokens_per_s_agree(batch, seq):
    """A decode step of ``seq`` query tokens per sequence (speculative verification) gives each
    sequence ``seq`` tokens when all are kept: TPOT = step / seq, and tokens/s = batch / TPOT.
    The audit's case (seq 4): TPOT was the whole 8.48 ms step beside 471.5 tokens/s."""
    r = gm.predict_inference("llama-3-8b", "h100", phase="decode", batch=batch, seq=seq,
                             context=2048)  # fmt: skip
    assert r.time_per_output_token_s == pytest.approx(r.time_s / seq, rel=1e-12)
    assert r.tokens_per_s == pytest.approx(batch / r.time_per_output_token_s, rel=1e-12)
    text = r.explain().splitlines()[1]
    assert f"step {gm.format_time(r.time_s)}" in text
    if seq == 1:
        assert "(TPOT)" in text
    else:
        assert f"TPOT {gm.format_time(r.time_s / seq)}" in text


def test_infer_cli_labels_the_tpot_of_a_multi_token_step(capsys):
    code, out, _ = _run(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100", "--seq", "4",
                        "--context", "2048", "--json")  # fmt: skip
    d = json.loads(out)
    assert code == 0 and d["time_per_output_token_s"] * 4 == pytest.approx(d["time_s"])
    code, out, _ = _run(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100", "--seq", "4",
                        "--context", "2048")  # fmt: skip
    assert code == 0 and f"TPOT {gm.format_time(d['time_s'] / 4)}" in out
    assert f"{gm.format_time(d['time_s'])} (TPOT)" not in out


# --- item 6: memory headlines ------------------------------------------------------------------


def _needs_has(text):
    m = re.search(r"needs ([0-9.]+) ([kMGTPE]?B), has ([0-9.]+) ([kMGTPE]?B)", text)
    assert m, text
    return float(m.group(1)), m.group(2), float(m.group(3)), m.group(4)


SCALE = {"GB": 1e9, "TB": 1e12, "PB": 1e15, "EB": 1e18}


def test_memory_headline_tells_needs_from_has(capsys):
    """Llama-3-8B, batch 371 at context 1280 on an H100: 30 MB over 80 GB. The headline read
    "does NOT fit, needs 80.0 GB, has 80.0 GB"; now the two differ, each within its printed
    rounding of the memory model's figures."""
    m = gm.llm.memory("llama-3-8b", "h100", batch=371, seq=1280, phase="decode")
    assert not m.fits and f"{m.total_bytes / 1e9:.1f}" == f"{m.capacity_bytes / 1e9:.1f}"
    code, out, _ = _run(capsys, "memory", "--model", "llama-3-8b", "--gpu", "h100",
                        "--batch", "371", "--seq", "1280")  # fmt: skip
    head = " ".join(" ".join(out.splitlines()[:2]).split())  # the console wraps long lines
    need, nu, has, hu = _needs_has(head)
    assert code == 0 and "does NOT fit" in head and (need, nu) != (has, hu)
    digits = len(str(need).split(".")[1])
    assert need * SCALE[nu] == pytest.approx(m.total_bytes, abs=0.51 * 10**-digits * SCALE[nu])
    assert has * SCALE[hu] == pytest.approx(m.capacity_bytes, abs=0.51 * 10**-digits * SCALE[hu])
    total = next(line for line in out.splitlines() if line.strip().startswith("total"))
    assert f"{need:.{digits}f} {nu}" in total
    # the same pair in the infer error (exit 2, one line)
    code, _, err = _run(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100",
                        "--batch", "371", "--context", "1280")  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert _needs_has(err) == (need, nu, has, hu)


def test_a_plan_that_fits_keeps_its_short_headline(capsys):
    m = gm.llm.memory("llama-3-8b", "h100", batch=8, seq=2048, phase="decode")
    code, out, _ = _run(capsys, "memory", "--model", "llama-3-8b", "--gpu", "h100", "--batch",
                        "8", "--seq", "2048")  # fmt: skip
    flat = " ".join(out.split())  # the console wraps long lines
    assert code == 0 and f"needs {m.total_bytes / 1e9:.1f} GB, has 80.0 GB" in flat


def test_an_oversubscribed_step_says_its_need_in_the_breakdowns_unit(capsys):
    """100 million sequences: the KV cache is petabytes; the "needs" beside it was
    "26905.11 TB"."""
    r = gm.predict_inference("llama-3-8b", "h100", batch=100_000_000, allow_oversubscribe=True)
    code, out, _ = _run(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100", "--batch",
                        "100000000", "--allow-oversubscribe")  # fmt: skip
    line = next(x for x in out.splitlines() if "memory per GPU" in x)
    need, unit, _, _ = _needs_has(line)
    assert code == 0 and unit == "PB" and "KV cache" in line and " PB" in line.split("KV cache")[1]
    assert need * 1e15 == pytest.approx(r.memory.total_bytes, abs=0.0051e15)


# --- item 7: comparison tables keep their row labels -------------------------------------------


def test_a_wide_comparison_wraps_its_columns_and_keeps_each_label(capsys):
    """Six GPUs side by side: the labels were cut to 'cal~' (calibration and calibrated on)
    and 'exp~'; now the GPU columns wrap into blocks beside the whole labels."""
    gpus = ["a100", "h100", "h200", "l40s", "b200", "mi300x"]
    code, out, _ = _run(capsys, "predict", "gemm", "--m", "4096", "--n", "4096", "--k", "4096",
                        "--gpu", ",".join(gpus))  # fmt: skip
    lines = out.splitlines()
    assert code == 0 and max(map(len, lines)) <= 100
    for label in ("time", "expected error", "bytes moved", "AI (FLOP/B)", "memory BW",
                  "ridge (FLOP/B)", "% of peak", "roofline time", "calibration",
                  "calibrated on"):  # fmt: skip
        assert any(line.startswith(label + "  ") for line in lines), label
    assert not any(re.match(r"^\S+~ ", line) for line in lines)
    headers = " ".join(lines[i - 1] for i, line in enumerate(lines) if line.startswith("---"))
    for g in gpus:
        assert gm.get_gpu(g).id in headers.split()
    # every GPU's time, in the block holding its column
    times = [line for line in lines if line.startswith("time  ")]
    for g in gpus:
        t = gm.format_time(gm.predict(gm.ops.Gemm(m=4096, n=4096, k=4096), g).time_s)
        assert any(t in line for line in times), g


def test_render_wraps_only_when_the_labels_would_be_cut():
    def table(n):
        t = Table(title="t", columns=["", *[f"gpu{i}" for i in range(n)]],
                  right={f"gpu{i}" for i in range(n)})  # fmt: skip
        t.add("calibration", *["x" * 20] * n)
        t.add("calibrated on", *["y" * 20] * n)
        return list(render_lines(t, 100))

    narrow = table(3)  # 13 + 3 x 22 = 79 columns: one block
    assert sum(line.startswith("---") for line in narrow) == 1
    wide = table(6)  # 145 columns: two blocks of three
    assert sum(line.startswith("---") for line in wide) == 2
    assert max(map(len, wide)) <= 100
    assert sum(line.startswith("calibrated on ") for line in wide) == 2
    assert sum(line.count("y" * 20) for line in wide) == 6  # no value lost or cut


def test_the_library_tells_needed_and_available_apart():
    """``MemoryBreakdown.message`` (what `memory`, `infer` and the library's errors print): Llama
    3 8B at batch 371 x 1280 on an 80 GB H100 needs a little more than 80 GB, so the pair gets the
    decimals that show it; a plan's length under a day is in hours, not '0.0 days'."""
    import gpumodel as gm
    from gpumodel.units import format_duration

    m = gm.llm.memory("llama-3-8b", "h100", batch=371, seq=1280)
    assert not m.fits and 80e9 < m.total_bytes < 80.1e9
    needs, has = m.message().removeprefix("needs ").split(", has ")
    assert needs != has and has.startswith("80.0")
    assert float(needs.split()[0]) == pytest.approx(m.total_bytes / 1e9, abs=0.01)
    assert format_duration(0.5) == "12.0 hours" and format_duration(2) == "2.0 days"
