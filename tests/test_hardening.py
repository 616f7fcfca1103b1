"""Regressions for issue #20's fuzz findings: one test per root cause listed under "Why".

Each test is named after the bug it pins. A bad input must end as a GpumodelError (on the CLI:
one line ``error: ...`` and exit code 2), never a traceback, hang, NaN or a silently wrong number.
"""

from __future__ import annotations

import errno
import gzip
import json
import math
import os
import random
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel import ops
from gpumodel._io import (
    OutputFileError,
    atomic_write_bytes,
    atomic_write_text,
    has_digit_run,
    json_depth,
    read_json,
)
from gpumodel.cli import main
from gpumodel.errors import GpumodelError, SpecError

ROOT = Path(__file__).resolve().parents[1]
H100_CAL = ROOT / "validation" / "results" / "h100-sxm" / "calibration.yaml"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *args: str, match: str = "") -> str:
    """The command exits 2 with one ``error:`` line naming ``match``."""
    code, _, err = run(capsys, *args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert match.lower() in lines[0].lower(), lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------------------
# tracebacks where a one-line error belongs


def test_zero_division_at_1e_300_link_bandwidth(capsys):
    refused(capsys, "allreduce", "--bytes", "1GB", "--gpus", "8", "--link-bandwidth",
            "1e-300 B/s", match="bandwidth")  # fmt: skip


def test_overflow_error_past_2_63(capsys):
    big = str(2**64)
    refused(capsys, "predict", "gemm", "--m", big, "--n", "4096", "--k", "4096", match="m")
    refused(capsys, "occupancy", "--gpu", "h100", "--threads", big, "--registers", "32")
    with pytest.raises(SpecError, match="2\\*\\*53"):
        ops.Gemm(m=2**63, n=2, k=2)
    with pytest.raises(SpecError):
        ops.Attention(batch=1, heads=1, seq=2**64, head_dim=64)


def test_unicode_decode_error_on_binary_input(capsys, tmp_path):
    binary = tmp_path / "x.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(SpecError, match="not UTF-8"):
        gm.load_spec_file(binary)
    with pytest.raises(GpumodelError, match="not UTF-8"):
        gm.load_calibration(binary)
    for suffix in (".jsonl", ".csv", ".json"):
        path = binary.with_suffix(suffix)
        path.write_bytes(bytes(range(256)) * 4)
        refused(capsys, "batch", str(path), match="binary")


def test_recursion_error_on_deep_json(capsys, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    refused(capsys, "batch", str(deep), match="nests deeper")
    refused(capsys, "diagnose", str(deep), match="deeper")
    with pytest.raises(SpecError, match="deeper"):
        read_json(deep)


def _depth_by_hand(text: str) -> int:
    """JSON nesting depth, one character at a time: the reference for json_depth."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


@pytest.mark.parametrize("text, depth", [
    ('{"a": "[[[[", "b": [[1]]}', 3),  # brackets inside a string do not count
    ('{"a": "]]]]]", "b": [[[1]]]}', 4),
    ('{"a": "x\\"[[[", "b": [1]}', 2),  # an escaped quote does not end the string
    ('{"a": "x\\\\", "b": [[1]]}', 3),  # an escaped backslash does not escape the quote
    ("[]", 1), ("1", 0), ("", 0),
])  # fmt: skip
def test_json_depth_by_hand(text, depth):
    assert json_depth(text) == depth == _depth_by_hand(text)


def test_json_depth_agrees_with_a_character_walk():
    rng = random.Random(7)

    def value(level: int) -> object:
        roll = rng.random()
        if level > 8 or roll < 0.3:  # strings full of what the scan must see through
            return "".join(rng.choice('[]{}"\\a') for _ in range(rng.randint(0, 6)))
        if roll < 0.65:
            return [value(level + 1) for _ in range(rng.randint(0, 3))]
        return {str(i): value(level + 1) for i in range(rng.randint(0, 3))}

    for _ in range(1000):
        text = json.dumps(value(0))
        assert json_depth(text, 10**9) == _depth_by_hand(text), text


def test_json_depth_without_escaped_quotes_agrees_with_a_character_walk():
    """The fast path (no backslash before a quote): quote parity over hundreds of strings (its
    running count wraps at 256) and brackets on both sides of them."""
    rng = random.Random(11)
    for _ in range(200):
        parts = [json.dumps("".join(rng.choice("[]{}a ") for _ in range(rng.randint(0, 5))))
                 for _ in range(rng.randint(0, 700))]  # fmt: skip
        nest = rng.randint(0, 80)
        text = "[" * nest + "[" + ", ".join(parts) + "]" + "]" * nest
        assert '\\"' not in text
        assert json_depth(text, 10**9) == _depth_by_hand(text) == nest + 1


@pytest.mark.parametrize("text, longer_than, expected", [
    (b'{"ts": 123}', 3, False), (b'{"ts": 1234}', 3, True), (b'"12a345"', 3, False),
    (b"", 0, False), (b"7", 0, True), (b"x" * 50 + b"9" * 101, 100, True),
    (b"9" * 100 + b".5", 100, False),
])  # fmt: skip
def test_has_digit_run_by_hand(text, longer_than, expected):
    assert has_digit_run(text, longer_than) is expected


def test_deep_yaml_segfault(tmp_path):
    # the recursive composer crashed the interpreter at this depth; run in a child process so a
    # crash fails this test instead of ending the test session
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 200_000 + "]" * 200_000 + "\n", encoding="utf-8")
    code = ("import sys, gpumodel as gm\n"
            "try:\n    gm.load_spec_file(sys.argv[1])\n"
            "except gm.SpecError as e:\n    print(e)\n")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code, str(deep)], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    # refused in one line: by the depth walk, or (libyaml >= 0.2.5 caps nesting itself, as the
    # PyYAML 6.0.4 wheels have it) by the parser, before any recursion
    assert "deeper" in res.stdout or "not valid YAML" in res.stdout, res.stdout
    assert len(res.stdout.strip().splitlines()) == 1


def test_wrong_typed_fields_in_presets_and_specs(tmp_path):
    spec = (ROOT / "specs" / "h100-sxm.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.replace("sm_count: 132", "sm_count: [132]"), encoding="utf-8")
    with pytest.raises(SpecError, match="sm_count"):
        gm.load_spec_file(bad)


def test_5000_digit_number_in_a_batch_row(capsys, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"op": "gemm", "m": ' + "9" * 5000 + ', "n": 8, "k": 8}\n', encoding="utf-8")
    refused(capsys, "batch", str(rows))
    csv = tmp_path / "rows.csv"
    csv.write_text("op,m,n,k\ngemm," + "9" * 5000 + ",8,8\n", encoding="utf-8")
    refused(capsys, "batch", str(csv), match="m")


def test_library_errors_are_project_errors_not_bare_value_error():
    for call in (lambda: gm.amdahl(1.5, 8), lambda: gm.amdahl(0.9, 0),
                 lambda: gm.data_parallel_step(-1.0, 1e9, 8, "h100"),
                 lambda: gm.data_parallel_step(1.0, 1e9, 0, "h100")):  # fmt: skip
        with pytest.raises(GpumodelError) as info:
            call()
        assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------------------------------------
# hangs and MemoryErrors: nothing loops or allocates in proportion to a user's size


def test_expand_copy_tensors_1e12_hang(capsys):
    # closed form over the count: returns at once (was: a Python list of 10**12 tensors)
    code, out, err = run(capsys, "predict", "expand_copy", "--tensors", "1e12", "--json",
                         "--calibration", "none")  # fmt: skip
    if code == 0:
        assert math.isfinite(json.loads(out)["time_s"]) and json.loads(out)["time_s"] > 0
    else:
        assert code == 2 and err.startswith("error: ")


_ROW = b'{"op": "gemm", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}\n'
_BATCH_PEAK = (
    "import resource, sys\n"
    "from gpumodel.cli import main\n"
    "code = main(['batch', sys.argv[1], '--csv', '--calibration', 'none'])\n"
    "sys.stderr.write(f'peak_kb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n')\n"
    "sys.exit(code)\n"
)


def _batch_peak_kb(path: Path, mb: float, env: dict | None = None) -> tuple[int, int]:
    """Write ``mb`` MB of rows to ``path``, run ``batch --csv`` on it in a child: (rows out,
    peak RSS kB)."""
    block = _ROW * 16384
    with path.open("wb") as fh:
        for _ in range(int(mb * 2**20) // len(block) + 1):
            fh.write(block)
    res = subprocess.run([sys.executable, "-c", _BATCH_PEAK, str(path)], cwd=ROOT, timeout=900,
                         capture_output=True, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:].decode()
    assert res.stdout.count(b"\n") == path.stat().st_size // len(_ROW) + 1  # header + rows
    return res.stdout.count(b"\n") - 1, int(res.stderr.decode().rsplit("peak_kb=", 1)[1])


def test_batch_jsonl_constant_memory(tmp_path):
    # 4x the rows, the same peak memory: rows are read, predicted and written a chunk at a
    # time. Held in memory, the extra ~95,000 rows and results would take > 100 MB.
    n_small, small = _batch_peak_kb(tmp_path / "small.jsonl", 2)
    n_big, big = _batch_peak_kb(tmp_path / "big.jsonl", 8)
    assert n_big >= 4 * n_small - 16384
    assert big - small < 40 * 1024, (small, big)


@pytest.mark.skipif(
    not os.environ.get("GPUMODEL_SLOW_TESTS"),
    reason="~50 s on 2 cores: set GPUMODEL_SLOW_TESTS=1 (the fuzz script does)",
)
def test_200mb_batch_jsonl_constant_memory(tmp_path):
    # the fuzz run's case: 200 MB of rows (3.2 million ops) in flat memory
    n, peak = _batch_peak_kb(tmp_path / "big.jsonl", 200)
    assert n > 3_000_000 and peak < 400 * 1024, peak


def test_arabic_indic_digits_are_not_a_size(capsys):
    refused(capsys, "dp-step", "--compute-ms", "100", "--grad-bytes", "1GB", "--bucket", "١٢٣")
    refused(capsys, "predict", "gemm", "--m", "٤٠٩٦", "--n", "8", "--k", "8", match="m")


def test_dev_zero_input(capsys):
    refused(capsys, "batch", "/dev/zero.jsonl")  # no such file: the plain error
    for args in (("diagnose", "/dev/zero"), ("specs", "check", "/dev/zero"),
                 ("calibrate", "--trace", "/dev/zero")):  # fmt: skip
        refused(capsys, *args, match="not a regular file")
    with pytest.raises(GpumodelError, match="not a regular file"):
        gm.load_calibration("/dev/zero")


def test_gzip_bomb_trace(capsys, tmp_path):
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        zeros = b" " * 2**20
        for _ in range(40):
            fh.write(zeros)
    line = refused(capsys, "diagnose", str(bomb), "--max-input-mb", "8", match="decompresses")
    assert "--max-input-mb" in line
    # the flag raises the limit for a real large trace: then it is read (and found not a trace)
    code, _, err = run(capsys, "diagnose", str(bomb), "--max-input-mb", "64")
    assert code == 2 and "decompresses" not in err


def test_dp_step_bucket_1_byte(capsys):
    # was a list of 28 x 10^9 buckets; the bucket count is now a closed form
    code, out, err = run(capsys, "dp-step", "--compute-ms", "100", "--grad-bytes", "28GB",
                         "--bucket", "1 B", "--gpus", "8", "--json")  # fmt: skip
    if code == 0:
        for row in json.loads(out)["points"] if "points" in out else []:
            assert all(math.isfinite(v) for v in row.values() if isinstance(v, float))
    else:
        assert code == 2 and err.startswith("error: ")


def test_attention_seq_1e12(capsys):
    code, out, err = run(capsys, "predict", "attention", "--seq", "1e12", "--json",
                         "--calibration", "none")  # fmt: skip
    if code == 0:
        assert math.isfinite(json.loads(out)["time_s"])
    else:
        assert code == 2 and err.startswith("error: ")


# ---------------------------------------------------------------------------------------------
# NaN, inf, negative and absurd outputs


def test_copy_bytes_inf():
    with pytest.raises(SpecError, match="bytes"):
        ops.Copy(bytes=math.inf)
    with pytest.raises(SpecError, match="bytes"):
        ops.Copy(bytes=math.nan)


def test_allreduce_bytes_1e30_absurd():
    with pytest.raises(SpecError, match="bytes"):
        ops.AllReduce(bytes=1e30, gpus=8)


def test_negative_family_overhead_in_a_calibration(tmp_path):
    text = H100_CAL.read_text(encoding="utf-8")
    head, overheads = text.split("  family_overhead_s:\n", 1)
    line = next(ln for ln in overheads.splitlines() if ln.startswith("    elementwise: "))
    bad = tmp_path / "neg.yaml"
    bad.write_text(head + "  family_overhead_s:\n" + overheads.replace(line, "    elementwise: -1", 1),
                   encoding="utf-8")  # fmt: skip
    assert "    elementwise: -1" in bad.read_text(encoding="utf-8")
    with pytest.raises(GpumodelError, match="family_overhead_s"):
        gm.load_calibration(bad)


def test_global_batch_minus_8():
    with pytest.raises(SpecError, match="global_batch"):
        gm.predict_training_step("llama-2-7b", "h100", 8, global_batch=-8)


def test_sweep_m_minus_4096():
    with pytest.raises(SpecError, match="m must be"):
        gm.sweep("gemm", "h100", m=[-4096, 4096], n=4096, k=4096, calibration="none")
    with pytest.raises(SpecError, match="batch"):
        gm.sweep_inference("llama-3-8b", "h100", batch=[-1, 8])
    with pytest.raises(SpecError, match="tp"):
        gm.sweep_training("llama-2-7b", "h100", tp=[2, 10**7])


def test_plan_train_price_minus_1(capsys):
    refused(capsys, "plan", "train", "--model", "llama-2-7b", "--gpu", "h100", "--gpus", "64",
            "--tokens", "1e12", "--price", "-1", match="price")  # fmt: skip
    with pytest.raises(SpecError, match="price"):
        gm.plan_training("llama-2-7b", "h100", 64, 1e12, price=-1.0)


def test_zero_tb_s_spec_fails_specs_check(capsys, tmp_path):
    spec = (ROOT / "specs" / "h100-sxm.yaml").read_text(encoding="utf-8")
    assert "bandwidth: 3.35 TB/s" in spec
    bad = tmp_path / "zero-bw.yaml"
    bad.write_text(spec.replace("bandwidth: 3.35 TB/s", "bandwidth: 0 TB/s", 1), encoding="utf-8")
    code, out, err = run(capsys, "specs", "check", str(bad))
    assert code != 0 and "bandwidth" in (out + err)


def test_nan_durations_in_a_trace(tmp_path):
    trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": float("nan"), "pid": 0, "tid": 7,
         "args": {"device": 0}},
        {"ph": "X", "cat": "kernel", "name": "k2", "ts": 10, "dur": -5, "pid": 0, "tid": 7,
         "args": {"device": 0}},
    ]}  # fmt: skip
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(trace), encoding="utf-8")  # json writes NaN literally
    try:
        report = gm.diagnose(path, gpu="h100")
    except GpumodelError:
        return
    d = report.to_dict()
    text = json.dumps(d, allow_nan=False)  # raises on a NaN or inf anywhere
    assert "-" not in str(d.get("speed_of_light_s", 0))
    assert text


# ---------------------------------------------------------------------------------------------
# silent accepts


def test_bytes_written_inf():
    with pytest.raises(SpecError, match="bytes_written"):
        ops.Kernel(flops=1e9, bytes=1e6, bytes_written=math.inf)


def test_amdahl_n_empty():
    with pytest.raises(SpecError, match="n"):
        gm.amdahl(0.9, [])


def test_diagnose_top_minus_1(capsys):
    trace = ROOT / "tests" / "fixtures" / "traces" / "item_sync.json.gz"
    with pytest.raises(SpecError, match="top"):
        gm.diagnose(trace, gpu="h100", top=-1)
    refused(capsys, "diagnose", str(trace), "--top", "-1", match="top")


def test_l2_hot_is_not_cold():
    with pytest.raises(SpecError, match="l2"):
        gm.predict(ops.Gemm(m=64, n=64, k=64), "h100", "none", l2="hot")  # type: ignore[arg-type]


def test_dtype_empty_is_not_bf16(capsys):
    refused(capsys, "predict", "gemm", "--m", "64", "--n", "64", "--k", "64", "--dtype", "",
            match="dtype")  # fmt: skip
    with pytest.raises(SpecError, match="dtype"):
        ops.Gemm(m=64, n=64, k=64, dtype="")
    with pytest.raises(SpecError, match="dtype"):
        gm.predict_inference("llama-3-8b", "h100", dtype="")


def test_a100_calibration_cached_as_h100(tmp_path, monkeypatch):
    cache = Path(os.environ["GPUMODEL_CACHE_DIR"]) / "calibrations"
    cache.mkdir(parents=True)
    text = H100_CAL.read_text(encoding="utf-8").replace(
        "gpu_id: h100-sxm", "gpu_id: a100-sxm4-80gb", 1
    )
    (cache / "h100-sxm.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(GpumodelError, match="a100"):
        gm.predict(ops.Gemm(m=64, n=64, k=64), "h100")


# ---------------------------------------------------------------------------------------------
# valid input that crashed


def test_allreduce_one_gpu_json(capsys):
    code, out, err = run(capsys, "allreduce", "--bytes", "1GB", "--gpus", "1", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert json.dumps(data, allow_nan=False)
    text = json.dumps(data)
    assert "Infinity" not in text and "NaN" not in text


# ---------------------------------------------------------------------------------------------
# writes that lose data


def test_collectives_merge_keeps_raw_measurements(tmp_path):
    from gpumodel.calibration import read_calibration_file
    from gpumodel.validate.families.collectives import merge_into_calibration

    path = tmp_path / "cal.yaml"
    path.write_bytes(H100_CAL.read_bytes())
    before = read_calibration_file(path, measurements=True)
    n = len(before.measurements)
    assert n > 1000  # the shipped file carries its run's raw measurements
    result = {"calibrated_held_out": {}, "datasheet_large": {},
              "params": {"all_reduce": {"gpus": 8, "alpha_s": 1e-5,
                                        "bus_bandwidth_bytes_per_s": 3e11}}}  # fmt: skip
    merge_into_calibration(path, result)
    after = read_calibration_file(path, measurements=True)
    assert len(after.measurements) == n
    assert after.parameters.collectives["all_reduce"].alpha_s == 1e-5
    # a fitted value out of bounds is refused, and the file is left as it was
    before_bytes = path.read_bytes()
    bad = {**result, "params": {"all_reduce": {"gpus": 8, "alpha_s": -1.0,
                                               "bus_bandwidth_bytes_per_s": 3e11}}}  # fmt: skip
    with pytest.raises(Exception, match="alpha_s"):
        merge_into_calibration(path, bad)
    assert path.read_bytes() == before_bytes


def test_png_written_in_place_keeps_old_on_failure(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib

    from gpumodel._io import save_figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = tmp_path / "plot.png"
    target.write_bytes(b"old png")
    fig = plt.figure()

    def full_disk(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(fig), "savefig", full_disk)
    with pytest.raises(OutputFileError, match="disk is full"):
        save_figure(fig, target)
    plt.close(fig)
    assert target.read_bytes() == b"old png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png"]


@pytest.mark.parametrize("target", ["DIR", "FILE/x.yaml", "/proc/gpumodel-test.yaml"])
def test_out_to_a_directory_or_proc(capsys, tmp_path, target):
    (tmp_path / "FILE").write_text("x", encoding="utf-8")
    path = {"DIR": str(tmp_path), "FILE/x.yaml": str(tmp_path / "FILE" / "x.yaml")}.get(
        target, target
    )
    with pytest.raises(OutputFileError):
        atomic_write_text(path, "data", mkdir=False)
    trace = ROOT / "tests" / "fixtures" / "traces" / "item_sync.json.gz"
    refused(capsys, "calibrate", "--trace", str(trace), "--gpu", "h100", "--out", path)


def test_tmp_litter_after_kill(tmp_path):
    # a child writes a large file and is SIGTERMed mid-write: the old file stays, no .tmp left
    target = tmp_path / "cal.yaml"
    target.write_text("old\n", encoding="utf-8")
    code = ("import sys, time\n"
            "from gpumodel._io import atomic_path\n"
            "with atomic_path(sys.argv[1]) as tmp, open(tmp, 'w') as fh:\n"
            "    fh.write('partial'); fh.flush(); print('writing', flush=True); time.sleep(60)\n")  # fmt: skip
    with subprocess.Popen([sys.executable, "-c", code, str(target)], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:  # fmt: skip
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"writing"
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
    assert child.returncode != 0
    assert target.read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.yaml"]


def test_ctrl_c_right_after_the_temp_file_is_made_leaves_no_litter(tmp_path, monkeypatch):
    """Fuzz seed 30: SIGINT landing between tempfile.mkstemp creating the temp file and the
    cleanup's try left the file. Here the signal lands the moment the file exists: it must
    surface as the KeyboardInterrupt, with the old file kept and nothing beside it."""
    import gpumodel._io as io_mod

    target = tmp_path / "cal.yaml"
    target.write_text("old\n", encoding="utf-8")
    real = io_mod._create_new

    def create_then_sigint(path):
        real(path)
        assert path.exists()
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(io_mod, "_create_new", create_then_sigint)
    # Python's own SIGINT handler, also where the suite runs in the background (`pytest &`
    # starts with SIGINT ignored, and then the signal would never arrive)
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            atomic_write_bytes(target, b"new")
    finally:
        signal.signal(signal.SIGINT, old_handler)
    assert target.read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.yaml"]


def test_an_empty_price_mapping_is_refused():
    """Fuzz seed 30: price={} priced no GPU and the sweep silently used the specs' prices."""
    with pytest.raises(SpecError, match="empty mapping prices no GPU"):
        gm.sweep_inference("llama-3-8b", "h100", batch=[1], context=[512], price={})
    with pytest.raises(SpecError, match="empty mapping prices no GPU"):
        gm.plan_training("llama-2-7b", "h100", 64, 1e12, price={})


def test_a_huge_scaling_and_missing_tokens_are_one_line_errors():
    """Fuzz seed 31: a 5000-digit ``scaling`` broke its own error message (int to str), and
    ``search_training(tokens=None)`` raised TypeError from math.isfinite."""
    with pytest.raises(SpecError, match="scaling must be one of weak, strong; got a 5001-digit"):
        gm.data_parallel_step(1.0, 1e9, 8, "h100", scaling=10**5000)
    with pytest.raises(SpecError, match="tokens must be a number, got None"):
        gm.search_training("llama-2-7b", "h100", None)


def test_write_under_full_disk_keeps_old_file(tmp_path, monkeypatch):
    target = tmp_path / "out.yaml"
    target.write_text("old\n", encoding="utf-8")

    def enospc(fd, *args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", enospc)
    with pytest.raises(OutputFileError, match="disk is full"):
        atomic_write_bytes(target, b"new" * 1000)
    assert target.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_mode_follows_umask_not_0600(tmp_path, umask):
    old = os.umask(umask)
    try:
        path = atomic_write_text(tmp_path / "c.yaml", "x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


# ---------------------------------------------------------------------------------------------
# root causes found by benchmarks/fuzz_campaign.py (2026-11-24, docs/hardening.md): one each


@pytest.mark.parametrize(
    "value",
    [None, 2**63, float("nan"), [], {}, object(), "a\x00b", "n" * 300],
    ids=["None", "2**63", "nan", "list", "dict", "object", "NUL", "long"],
)
def test_fuzz_reader_given_a_non_path(value):
    # Path(x) raised TypeError / ValueError (NUL) / OSError (ENAMETOOLONG) before _io saw it
    for reader in (gm.load_spec_file, gm.load_system_file, gm.diagnose, gm.calibrate_from_trace):
        # (diagnose also takes a loaded Chrome trace: a dict or list is read as one)
        with pytest.raises(GpumodelError, match=r"path|trace"):
            reader(value)


@pytest.mark.parametrize(
    "value",
    [1e300, 10**5000, None, "", " ", "é" * 300, ["h100"]],
    ids=["1e300", "5000-digits", "None", "empty", "blank", "long", "list"],
)
def test_fuzz_gpu_model_system_name_not_text(value):
    # 'float' object has no attribute 'strip'; a 5000-digit int could not even be shown
    for lookup in (gm.get_gpu, gm.get_model, gm.get_system, gm.load_host):
        if lookup is gm.load_host and value is None:
            continue  # None is the documented default host
        with pytest.raises(GpumodelError):
            lookup(value)


@pytest.mark.parametrize("dirs", [1.5, 0, None, {}, object(), ""])
def test_fuzz_search_dirs_not_a_list_of_paths(dirs):
    # TypeError: 'float' object is not iterable
    for lister in (gm.list_gpus, gm.list_models, gm.list_systems):
        with pytest.raises(SpecError):
            lister(dirs)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary", b"a: " + b"[" * 5000 + b"]" * 5000,
                                     b"kernel_launch_s: .inf\n"])  # fmt: skip
def test_fuzz_host_profile_read_unbounded(tmp_path, content):
    # load_host read with yaml.safe_load(path.read_text()): UnicodeDecodeError, RecursionError
    path = tmp_path / "host.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError):
        gm.load_host(path)


def test_fuzz_host_profile_costs_are_bounded():
    # eager op costs of inf or 1e300 s were accepted and came out as inf / 10^300 s
    base = gm.load_host(None).model_dump(by_alias=True)
    for value in (float("inf"), 1e300, True):
        with pytest.raises(SpecError, match="kernel_launch_s"):
            gm.HostProfile(**{**base, "kernel_launch_s": value})


def test_fuzz_saved_plan_read_unbounded(capsys, tmp_path):
    # report plan used json.loads(path.read_text()): RecursionError on a deep file
    plan = tmp_path / "plan.json"
    plan.write_text("[" * 100_000 + "]" * 100_000)
    refused(capsys, "report", "plan", str(plan), "--out", str(tmp_path / "r.html"), match="deeper")


def test_fuzz_html_mode_ignores_umask(tmp_path):
    # the HTML writer chmod-ed 0644 after the atomic write, whatever the umask
    old = os.umask(0o027)
    try:
        path = gm.write_report("plan", gm.plan_serving("llama-3-8b", "h100"), tmp_path / "r.html")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


class _Failing:
    def __init__(self, exc: OSError):
        self.exc = exc

    def write(self, text: str) -> int:
        raise self.exc

    def flush(self) -> None:
        raise self.exc

    def fileno(self) -> int:
        return 1


@pytest.mark.parametrize("exc, code", [(OSError(errno.ENOSPC, "No space left on device"), 2),
                                        (BrokenPipeError(errno.EPIPE, "Broken pipe"), 1)])  # fmt: skip
def test_fuzz_output_to_a_full_disk_or_closed_pipe(monkeypatch, capsys, exc, code):
    # `gpumodel ... >/dev/full` and `| head -c 1` ended in OSError / BrokenPipeError tracebacks
    monkeypatch.setattr(sys, "stdout", _Failing(exc))
    # a closed pipe: click's own convention, exit 1 and nothing printed (141 when it reaches us)
    got = main(["predict", "gemm", "--m", "64", "--n", "64", "--k", "64", "--json"])
    assert got == code or (code == 1 and got == 141)


def test_fuzz_closed_stdout_and_ascii_locale(tmp_path):
    # `gpumodel models list --json 1>&-`: 'NoneType' object has no attribute 'write';
    # PYTHONIOENCODING=ascii: UnicodeEncodeError on the tables' box characters
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "ascii"}
    cmd = f"{sys.executable} -m gpumodel models list --json 1>&- && {sys.executable} -m gpumodel specs list >/dev/null"
    done = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("args", [["amdahl", "--parallel-fraction", " ", "--gpus", "8"],
                                  ["calibrations", "--gpu", ""],
                                  ["specs", "check", ""]])  # fmt: skip
def test_fuzz_blank_option_value_read_as_default(capsys, args):
    # '' and ' ' were read as "not given": amdahl's fraction, calibrations' GPU filter
    refused(capsys, *args, match="must not be empty")


def test_fuzz_5000_digit_int_in_an_error_message():
    # repr(10**5000) raises "Exceeds the limit (4300 digits)" while building the message
    with pytest.raises(SpecError, match="numbers"):
        gm.sweep("gemm", "h100", m=[10**5000], n=64, k=64)
    with pytest.raises(GpumodelError):
        gm.format_quantity(1e9, 10**5000)  # type: ignore[arg-type]
    with pytest.raises(GpumodelError, match="too large"):
        gm.parse_quantity(10**5000, "bytes")


def test_fuzz_unicode_digits_in_arrays_and_lists(capsys):
    # float('١٢') == 12.0: the vectorised sweep and the CLI's GPU-count lists took them
    with pytest.raises(SpecError, match="numbers"):
        gm.sweep("gemm", "h100", m=["١٢"], n=64, k=64)
    refused(capsys, "dp-step", "--compute-ms", "100", "--grad-bytes", "1GB", "--gpus", "४०९६",
            match="not a number")  # fmt: skip
    refused(capsys, "amdahl", "--parallel-fraction", "0.9", "--gpus", "nan", match="gpus")


def test_fuzz_parse_quantity_bad_dimension():
    # KeyError / TypeError: unhashable type from EXAMPLES[dimension]
    for dimension in ([], "bogus", float("nan")):
        with pytest.raises(GpumodelError, match="dimension"):
            gm.parse_quantity("1 GB", dimension)  # type: ignore[arg-type]


def test_fuzz_model_helpers_take_wrong_types():
    # AttributeError 'str' has no attribute 'vendor' (occupancy), 'float' ... 'sm_count'
    # (waves), numpy's string ufunc (littles_law), OverflowError at 2**63, the wrong GPU's price
    with pytest.raises(GpumodelError):
        gm.occupancy("", 256, 32)  # type: ignore[arg-type]
    with pytest.raises(GpumodelError):
        gm.waves(float("nan"), 10, 1)  # type: ignore[arg-type]
    with pytest.raises(SpecError):
        gm.littles_law("4096", 2)
    assert gm.littles_law(2**63, 1) == float(2**63)
    with pytest.raises(GpumodelError):
        gm.price_for(float("-inf"), 2.0)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="op"):
        gm.speed_of_light("4096", "h100")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="gpu_counts"):
        gm.scaling_curve(0.1, 1e9, 8)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="broadcast"):
        gm.occupancy_table("h100", [128, 256], 32, [])
    with pytest.raises(SpecError, match="calibration"):
        gm.concurrency(gm.get_gpu("h100"), calibration=2**70)
    with pytest.raises(SpecError, match="resident warps"):
        gm.concurrency(gm.get_gpu("h100"), resident_warps_per_sm=float("inf"))


def test_fuzz_llm_planner_arguments_checked_once():
    # pydantic ValidationError leaked from MemoryBreakdown (seq=inf, batch=1.5, attention='bf17');
    # TypeError from min('bf17', ...); kv_cache='' read as the default; a 2**70 s stream floor
    with pytest.raises(SpecError, match="seq"):
        gm.fits("llama-3-8b", "h100", seq=float("inf"))
    with pytest.raises(SpecError, match="batch"):
        gm.fits("llama-3-8b", "h100", batch=1.5)
    with pytest.raises(SpecError, match="limit"):
        gm.max_batch("llama-3-8b", "h100", limit=None)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="recompute"):
        gm.predict_training_step("llama-3-8b", "h100", 8, recompute="bf17")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="kv_cache"):
        gm.predict_inference("llama-3-8b", "h100", kv_cache="")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="stream_floor_s"):
        gm.predict_inference("llama-3-8b", "h100", stream_floor_s=2**70)
    with pytest.raises(SpecError, match="op_times"):
        gm.predict_inference("llama-3-8b", "h100", op_times="4096")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="ttft"):
        gm.plan_serving("llama-3-8b", "h100", ttft_slo_s="")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="gpus"):
        gm.search_training("llama-3-8b", "h100", 1e12, gpus=-1)  # type: ignore[arg-type]
    with pytest.raises(GpumodelError, match="unknown model"):
        gm.explain_symbolic("gemm", "h100", model="nope")


def test_fuzz_infinite_intensity_is_not_json(capsys):
    # a kernel moving 0 bytes printed "arithmetic_intensity": Infinity (not JSON); later runs
    # found the same infinity in the library's result, so such a kernel is refused: FLOPs are
    # computed from and into memory (an empty kernel, no FLOPs and no bytes, stays valid)
    refused(capsys, "predict", "kernel", "--flops", "1e12", "--bytes", "0", "--json",
            match="moves at least 1 byte")  # fmt: skip
    code, out, _ = run(capsys, "predict", "kernel", "--flops", "1e12", "--bytes", "1", "--json")
    assert code == 0
    data = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in JSON output"))
    assert data["arithmetic_intensity"] == pytest.approx(1e12) and data["time_s"] > 0


@pytest.mark.parametrize("field, value", [("memory.bus_width_bits", True),
                                          ("name", ""), ("boost_clock", 1e-300)])  # fmt: skip
def test_fuzz_spec_field_true_empty_or_tiny(tmp_path, field, value):
    # `bus_width_bits: true` was a 1-bit bus, `name: ''` passed, a 1e-300 Hz clock gave 10^304 s
    import yaml

    data = yaml.safe_load((ROOT / "specs" / "h100-sxm.yaml").read_text())
    node = data
    *parents, leaf = field.split(".")
    for key in parents:
        node = node[key]
    node[leaf] = value
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError):
        gm.load_spec_file(path)


def test_fuzz_calibration_efficiency_1e_300(tmp_path):
    # gemm.bf16.efficiency: 1e-300 was "> 0" and made a GEMM take 10^296 s
    from gpumodel.calibration import END_MARKER

    text = H100_CAL.read_text()
    head = text[: text.index("\nmeasurements:") + 1]
    assert "efficiency:" in head
    bad = head.replace("dram_efficiency:", "dram_efficiency: 1.0e-300\n  _was_dram_efficiency:", 1)
    path = tmp_path / "cal.yaml"
    path.write_text(bad + END_MARKER)
    with pytest.raises(GpumodelError, match="efficiency"):
        gm.load_calibration(path)


def test_fuzz_fifo_in_a_specs_dir_hangs_the_lookup(tmp_path):
    # _peek_names read every *.yaml with path.read_text(): a FIFO blocked forever
    os.mkfifo(tmp_path / "fifo.yaml")
    signal.signal(signal.SIGALRM, lambda *a: pytest.fail("the spec lookup hung on a FIFO"))
    signal.alarm(20)
    try:
        with pytest.raises(GpumodelError):
            gm.list_gpus([tmp_path])
    finally:
        signal.alarm(0)


def test_fuzz_unknown_system_on_one_gpu():
    # the system was looked up only for the topology, which one GPU skips: 'bf17' passed
    with pytest.raises(SpecError, match="unknown system"):
        ops.AllReduce(bytes=1e9, gpus=1, system="bf17")


def test_fuzz_write_to_a_300_character_name_or_under_a_file(tmp_path):
    # check_target's path.is_dir() raised ENAMETOOLONG; HostProfile.save mkdir-ed under a file
    with pytest.raises(OutputFileError):
        atomic_write_text(tmp_path / ("n" * 300 + ".yaml"), "x")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputFileError):
        gm.load_host(None).save(tmp_path / "afile" / "host.yaml")


def test_fuzz_write_report_of_the_wrong_source(tmp_path):
    # TypeError: 'int' object is not iterable inside the page builder
    for source in (-1, "", True, {}):
        with pytest.raises(SpecError, match="report needs"):
            gm.write_report("plan", source, tmp_path / "r.html")


def test_fuzz_sweep_llm_enum_typo(capsys):
    # --fusion '४०९६' in inference mode was never looked at
    refused(capsys, "sweep-llm", "--model", "llama-3-8b", "--gpu", "h100", "--fusion", "४०९६",
            match="fusion")  # fmt: skip


def test_fuzz_200mb_json_batch_memory_error(capsys, tmp_path, monkeypatch):
    # a .json batch is parsed whole (~10x its size): 200 MB hit MemoryError under a 2 GB cap;
    # it is bounded like YAML (64 MB) and the message points to JSONL, which streams
    rows = [{"op": "gemm", "m": 64, "n": 64, "k": 64}] * 100
    path = tmp_path / "ops.json"
    path.write_text(json.dumps(rows))
    import gpumodel.batchio

    assert path.stat().st_size > 1000
    monkeypatch.setattr(gpumodel.batchio, "max_input_bytes", lambda yaml=False: 1000)
    refused(capsys, "batch", str(path), "--gpu", "h100", match=".jsonl")


def test_fuzz_flags_and_unused_options_are_checked():
    # fits(strict='') read its truthiness; plan_serving(gpus=5) ended in "int is not iterable";
    # a fused training step never looked at `host`, so host={} passed
    with pytest.raises(SpecError, match="strict"):
        gm.fits("llama-3-8b", "h100", strict="")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="gpus"):
        gm.plan_serving("llama-3-8b", 5)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="host"):
        gm.predict_training_step("llama-3-8b", "h100", 8, host={})  # type: ignore[arg-type]


def test_fuzz_validate_report_name_too_long(capsys):
    # --report with a 300-character name: OSError ENAMETOOLONG from Path.exists()
    refused(capsys, "validate", "--backend", "numpy", "--report", "é" * 300, match="too long")


def test_fuzz_final_run_leftovers():
    # found by the final campaign run: SympifyError on size=None, a None micro-batch multiplied,
    # an unused host never looked at, repr of a 5000-digit int in two messages
    with pytest.raises(SpecError, match="size"):
        gm.explain_symbolic("gemm", "h100", size=None)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="micro_batch"):
        gm.search_training("llama-3-8b", "h100", 1e12, micro_batch=None)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="host"):
        gm.search_training("llama-3-8b", "h100", 1e12, host=float("nan"))
    with pytest.raises(SpecError, match="digit"):
        gm.predict(ops.Gemm(m=64, n=64, k=64), "h100", l2=10**5000)  # type: ignore[arg-type]


def test_fuzz_leftovers_closed_by_the_lead(tmp_path):
    """The campaign's remaining cases: the LLM sweeps take the scalar functions' declared
    constraints, sweep() takes an op name, a strided kernel's bytes are bounded and its writes
    are part of its bytes, a calibration's power is finite, a spec's price is bounded."""
    for bad in (dict(grid="yes"), dict(kv_cache=float("inf")), dict(fusion=float("inf")),
                dict(host_per_kernel_s=-1.0)):  # fmt: skip
        with pytest.raises(SpecError):
            gm.sweep_inference("llama-3-8b", "h100", batch=[1, 2], **bad)
    for bad in (dict(grid=1), dict(global_batch=-8), dict(zero=5), dict(fragmentation=0.5)):
        with pytest.raises(SpecError):
            gm.sweep_training("llama-2-7b", "h100", **bad)
    with pytest.raises(SpecError, match="op name"):
        gm.sweep([], "h100")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="written_per_element"):
        ops.StridedElementwise(kind="cast", n=8, bytes_per_element=6, written_per_element=2**70)
    with pytest.raises(SpecError, match="exceeds"):
        ops.StridedElementwise(kind="cast", n=8, bytes_per_element=2, written_per_element=4)
    text = H100_CAL.read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("tensor_power_w_per_sm:"))
    bad_cal = tmp_path / "power.yaml"
    bad_cal.write_text(text.replace(line, line.split(":")[0] + ": .inf", 1), encoding="utf-8")
    with pytest.raises(GpumodelError, match="tensor_power_w_per_sm"):
        gm.load_calibration(bad_cal)
    spec = (ROOT / "specs" / "h100-sxm.yaml").read_text(encoding="utf-8")
    price = next(ln for ln in spec.splitlines() if ln.strip().startswith("usd_per_hour:"))
    (tmp_path / "h100-sxm.yaml").write_text(
        spec.replace(price, price.split(":")[0] + ": 1.0e+30", 1), encoding="utf-8")  # fmt: skip
    from gpumodel.specs import load_spec_file

    with pytest.raises(GpumodelError, match="usd_per_hour"):
        load_spec_file(tmp_path / "h100-sxm.yaml")


def test_fuzz_final_rerun_findings(capsys):
    """The campaign's re-run at the end of the session (9,865 cases, seed 20): a 5000-digit
    --dp ended in int()'s digit-limit ValueError, a number given as the GPU list in a
    TypeError, and sweep-llm --tokens was silently ignored by an inference sweep."""
    code, _, err = run(capsys, "sweep-llm", "--model", "llama-3-8b", "--gpu", "h100",
                       "--dp", "9" * 5000)  # fmt: skip
    assert code == 2 and "5000-digit number is out of range" in err and "Traceback" not in err
    with pytest.raises(SpecError, match="gpu must be a GPU name"):
        gm.sweep_inference("llama-3-8b", 10**5000)  # type: ignore[arg-type]
    code, _, err = run(capsys, "sweep-llm", "--model", "llama-3-8b", "--gpu", "h100",
                       "--tokens", "inf")  # fmt: skip
    assert code == 2 and "--tokens is a training option" in err


def test_fuzz_leftovers_of_the_final_rerun_closed(capsys, tmp_path):
    """The final re-run's last findings: an attention sequence of 10^12 tokens (5.7 x 10^13 s),
    empty calibration metadata (``host_profile: {}``, an empty power architecture or
    unavailable family), an empty unit, and validate arguments it ignored (a re-fit given
    --families or a number as --backend; --out - wrote a file named '-')."""
    from gpumodel.units import format_quantity

    refused(capsys, "predict", "attention", "--seq", "1e12", "--gpu", "h100", match="2**30 tokens")
    assert gm.predict(ops.Attention(seq=2**20), "h100").time_s > 0  # a million tokens is fine
    with pytest.raises(GpumodelError, match="unit must not be empty"):
        format_quantity(3e12, "")
    text = H100_CAL.read_text(encoding="utf-8")
    for name, edit in (("host_profile", text.replace("\nhost_profile: null\n", "\nhost_profile: {}\n", 1)),
                       ("architecture", text.replace("  power:\n    architecture: hopper",
                                                     "  power:\n    architecture: ''", 1))):  # fmt: skip
        assert edit != text
        bad = tmp_path / f"{name}.yaml"
        bad.write_text(edit, encoding="utf-8")
        with pytest.raises(GpumodelError, match=name):
            gm.load_calibration(bad)
    argv = ("validate", "--from-measurements", str(H100_CAL), "--out", str(tmp_path / "c.yaml"))
    refused(capsys, *argv, "--backend", "9007199254740993", match="backend must be one of")
    refused(capsys, *argv, "--families", "gemm", match="leave out --families")
    refused(capsys, "validate", "--backend", "numpy", "--families", "1_000", match="family must")
    refused(capsys, "validate", "--from-measurements", str(H100_CAL), "--out", "-",
            match="not standard output")  # fmt: skip
    assert not (Path.cwd() / "-").exists()


def test_fuzz_evening_rerun_findings(capsys, tmp_path):
    """The campaign re-run of the evening (9,704 cases): a bucket of 1e-9 B (a 7.8 x 10^12 s
    step), a scaling curve without compute (infinite speedup), a kernel of 1e-300 B (infinite
    intensity), sweep axes that do not broadcast or are empty (numpy tracebacks), zero=None
    in the training planners, a 5000-digit runtime name and allow_oversubscribe, and a
    conditions re-fit from a file that is not JSON."""
    refused(capsys, "dp-step", "--compute-ms", "100", "--grad-bytes", "1GB", "--gpus", "1,8",
            "--bucket", "1e-9", "--gpu", "h100", match="bucket size (bytes)")  # fmt: skip
    with pytest.raises(SpecError, match="compute time"):
        gm.scaling_curve(0, 1e9, [1, 2], "h100")
    with pytest.raises(SpecError, match="at least 1 byte"):
        ops.Kernel(flops=1e10, bytes=1e-300)
    with pytest.raises(SpecError, match="at least 1 byte"):
        gm.sweep("kernel", "h100", flops=[1e10], bytes=[1e-300])
    assert gm.sweep("kernel", "h100", flops=[1e10], bytes=[1.0])["time_s"][0] > 0
    # and none: a kernel that moves no byte has an infinite intensity (the second re-run)
    with pytest.raises(SpecError, match="moves at least 1 byte"):
        ops.Kernel(flops=1e10, bytes=0)
    with pytest.raises(SpecError, match="moves at least 1 byte"):
        gm.sweep("kernel", "h100", flops=[1e10], bytes=[0.0])
    assert gm.predict(ops.Kernel(flops=0, bytes=0), "h100").time_s > 0  # the empty kernel
    with pytest.raises(SpecError, match="fma"):
        gm.sweep("kernel", "h100", flops=[1e10], bytes=[8.0], fma=10**5000)
    with pytest.raises(SpecError, match="give at least one value"):
        gm.sweep("gemm", "h100", m=[1, 2], n=[], k=[4])
    with pytest.raises(SpecError, match="do not broadcast"):
        gm.sweep("gemm", "h100", m=[1, 2], n=[1, 2, 3], k=[4])
    with pytest.raises(SpecError, match="zero must be given"):
        gm.search_training("llama-2-7b", "h100", 1e12, zero=None)
    with pytest.raises(SpecError, match="5001-digit number"):
        gm.predict_inference("llama-3-8b", "h100", runtime=10**5000)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="allow_oversubscribe"):
        gm.predict_inference("llama-3-8b", "h100", allow_oversubscribe=1)  # type: ignore[arg-type]
    not_json = tmp_path / "m.json"
    not_json.write_text("", encoding="utf-8")
    refused(capsys, "validate", "--conditions", "--from-measurements", str(not_json),
            "--out", str(tmp_path / "c.yaml"), match="not valid JSON")  # fmt: skip


def test_fuzz_seed21_calibration_name_is_checked_up_front(capsys):
    """Seed 21's campaign: `plan serve --calibration inf` printed a plan with every GPU
    infeasible ("unknown GPU 'inf'") and exit 0; a calibration that is neither a file nor a GPU
    id is the user's input error, said once, exit 2, on every command."""
    for argv in (["plan", "serve", "--model", "llama-3-8b", "--gpu", "h100", "--rate", "5"],
                 ["predict", "gemm", "--m", "64", "--n", "64", "--k", "64", "--gpu", "h100"]):  # fmt: skip
        refused(capsys, *argv, "--calibration", "inf", match="neither a file nor a GPU id")
    with pytest.raises(GpumodelError, match="neither a file nor a GPU id"):
        gm.plan_serving("llama-3-8b", ["h100", "a100"], rate=5, calibration="-inf")
    plan = gm.plan_serving("llama-3-8b", ["h100", "a100"], rate=5, calibration="none")
    assert all(o.feasible for o in plan.options)  # 'none' still means the datasheet for all


def test_fuzz_seed28_required_counts_and_huge_condition():
    """Seed 28's campaign: a required count given as None passed the "None: not given" check
    and failed later with a TypeError; a 5000-digit ``condition`` broke its own message."""
    with pytest.raises(SpecError, match="prompt"):
        gm.plan_serving("llama-3-8b", "h100", prompt=None, rate=5)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="gpus"):
        gm.plan_training("llama-3-8b", "h100", None, 1e9)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="5001-digit number"):
        gm.predict(ops.Gemm(m=64, n=64, k=64), "h100", condition=10**5000)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# an output path that is one of the command's inputs (fuzz, 2026-11-30): the input was replaced


def test_an_output_never_overwrites_the_commands_input(capsys, tmp_path):
    trace = tmp_path / "step.json.gz"
    trace.write_bytes((ROOT / "tests/fixtures/traces/lm_head_50257.json.gz").read_bytes())
    before = trace.read_bytes()
    for args in (("calibrate", "--trace", str(trace), "--gpu", "h100", "--step-ms", "45",
                  "--out", str(trace)),
                 ("diagnose", str(trace), "--html", str(trace)),
                 ("report", "diagnose", str(trace), "--out", str(trace))):  # fmt: skip
        refused(capsys, *args, match="read that file as input")
        assert trace.read_bytes() == before, args
    plan = tmp_path / "plan.json"
    code, out, _ = run(capsys, "plan", "train", "--model", "llama-2-7b", "--tokens", "1T",
                       "--gpu", "h100", "--days", "30", "--json")  # fmt: skip
    plan.write_text(out)
    refused(capsys, "report", "plan", str(plan), "--out", str(plan), match="as input")
    assert plan.read_text() == out
    code, _, err = run(capsys, "report", "plan", str(plan), "--out", str(tmp_path / "plan.html"))
    assert code == 0, err  # another path is fine


def test_a_script_may_save_over_what_it_loaded(tmp_path):
    """Outside a CLI command the library keeps no list of inputs: load, change, save back."""
    path = tmp_path / "host.yaml"
    gm.load_host("reference-h100").save(path)
    host = gm.load_host(str(path))
    host.model_copy(update={"name": "mine"}).save(path)
    assert gm.load_host(str(path)).name == "mine"


# ---------------------------------------------------------------------------------------------
# the fuzz pass of 2026-11-30: tracebacks, inf and absurd numbers where a line belongs


def _fixture_trace() -> dict:
    return json.loads(gzip.decompress(
        (ROOT / "tests/fixtures/traces/lm_head_50257.json.gz").read_bytes()))  # fmt: skip


def test_odd_trace_fields_are_no_traceback(capsys, tmp_path):
    doc = _fixture_trace()
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    ops_ = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"
            and (e.get("args") or {}).get("Input Dims")]  # fmt: skip
    kernels[0]["args"] = [1, 2, 3]  # another tool's "args": not an object
    ops_[0]["args"]["Input Dims"] = [[float("nan"), 3]]  # not sizes
    ops_[1]["args"]["Input Dims"] = [["a", 3]]
    ops_[2]["args"]["Input Strides"] = [[1e300, 1]]
    kernels[1]["dur"] = 1e300  # a corrupt duration: dropped and said, not 2e289 days a step
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, "diagnose", str(path))
    assert code == 0 and "Traceback" not in err and "days" not in out, err
    assert "dropped 1 event(s)" in out
    code, out, err = run(capsys, "calibrate", "--trace", str(path), "--gpu", "h100",
                         "--step-ms", "45", "--out", str(tmp_path / "c.yaml"))  # fmt: skip
    assert code == 0, err


def test_a_kernel_summary_of_zero_time_is_refused(capsys, tmp_path):
    head = (ROOT / "tests/fixtures/traces/nsys_cuda_gpu_kern_sum_synthetic.csv").read_text()
    path = tmp_path / "zero.csv"
    path.write_text(head.splitlines()[0] + '\n"0.0","0","10","0","0","0","0","0","k1"\n')
    refused(capsys, "diagnose", str(path), "--gpu", "h100", match="took no time")


@pytest.mark.parametrize("args, match", [
    (("plan", "train", "--model", "llama-2-7b", "--tokens", "1e-320", "--gpus", "8"), "tokens"),
    (("plan", "train", "--model", "llama-2-7b", "--tokens", "0.5", "--gpus", "8"), "tokens"),
    (("plan", "train", "--model", "llama-2-7b", "--tokens", "1T", "--gpus", "8", "--mfu",
      "1e-310"), "mfu"),
    (("plan", "train", "--model", "llama-2-7b", "--tokens", "1T", "--gpus", "8",
      "--global-batch", "1000000000"), "more than the run's"),
    # the same over several counts, or the count searched for a deadline: was priced (0.0 days)
    (("plan", "train", "--model", "llama-2-7b", "--tokens", "1000", "--gpus", "8,16"),
     "more than the run's 1,000: lower --global-batch or raise --tokens"),
    (("plan", "train", "--model", "llama-2-7b", "--tokens", "1000", "--days", "30"),
     "more than the run's 1,000"),
    (("plan", "serve", "--model", "llama-3-8b", "--gpu", "h100", "--rate", "1e-310/s"), "rate"),
    (("littles-law", "--gpu", "h100", "--bytes-per-thread", "5e-324"), "bytes per thread"),
    (("sweep-llm", "--model", "llama-3-8b", "--batch", "1:1200:+1", "--context", "1:8192:+1",
      "--rows", "1"), "coarser step"),  # 9.8 M points ran past 100 s at 3.7 GB
    (("roofline", "--gpu", "h100", "--dtype", "fp4"), "no fp4 rate"),  # an empty table
    # a price list that prices none of the plan's GPUs, or one GPU twice: the spec's price was
    # used silently / the second won
    (("plan", "train", "--model", "llama-2-7b", "--tokens", "1T", "--gpu", "h100", "--days", "30",
      "--price", "a100=2"), "prices none of the GPUs"),
    (("plan", "train", "--model", "llama-2-7b", "--tokens", "1T", "--gpu", "h100", "--days", "30",
      "--price", "h100=2,h100=3"), "priced twice"),
    (("plan", "serve", "--model", "llama-3-8b", "--gpu", "h100", "--price", "h100=2,h100-sxm=3"),
     "priced twice"),
])  # fmt: skip
def test_inputs_that_gave_inf_or_nonsense_are_refused(capsys, args, match):
    refused(capsys, *args, match=match)


def test_none_for_a_required_count_is_a_gpumodel_error():
    with pytest.raises(GpumodelError, match="must be a number"):
        gm.predict_inference("llama-3-8b", "h100", batch=None)
    # gpus is not required: None is its default, one replica of tp GPUs (as `infer --tp`)
    assert gm.predict_inference("llama-3-8b", "h100", batch=1, gpus=None, tp=2).gpus == 2


def test_no_inf_or_nan_in_a_formatted_number(capsys):
    from gpumodel.units import format_number

    assert (format_number(math.inf), format_number(math.nan)) == ("unbounded", "-")
    code, out, _ = run(capsys, "amdahl", "--parallel-fraction", "1")
    assert code == 0 and "unbounded" in out and "inf" not in out


def test_a_failed_command_prints_only_its_error_and_warnings_come_once(capsys, tmp_path):
    """Fuzz, 2026-11-30: the host-profile warning printed before the error line (two lines on
    stderr for an exit 2), and twice for `plan train --fusion unfused`."""
    (tmp_path / "a-file").write_text("")  # a plot under a file cannot be written
    line = refused(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100", "--host",
                   "reference-h100", "--plot", str(tmp_path / "a-file" / "p.png"))  # fmt: skip
    assert "warning" not in line
    code, _, err = run(capsys, "plan", "train", "--model", "llama-2-7b", "--tokens", "1T",
                       "--gpu", "h100", "--days", "30", "--fusion", "unfused")  # fmt: skip
    assert code == 0 and err.count("warning:") <= 1, err


def test_the_sweeps_check_their_price_list_as_the_plans_do():
    with pytest.raises(SpecError, match="prices none of the GPUs"):
        gm.sweep_inference("llama-3-8b", "h100", batch=[1], context=[512], price={"a100": 2.0})
    with pytest.raises(SpecError, match="prices none of the GPUs"):
        gm.sweep_training("llama-2-7b", "h100", price={"a100": 2.0})


# --- the seventeenth session's new-user pass (docs/hardening.md) -------------------------------


@pytest.mark.parametrize("dtype", ["fp8", "int8", "fp4"])
def test_conv2d_takes_only_what_f_conv2d_runs(capsys, dtype):
    code, _, err = run(capsys, "predict", "conv2d", "--batch", "8", "--in-channels", "64",
                       "--out-channels", "64", "--height", "56", "--width", "56", "--kernel", "3",
                       "--dtype", dtype)  # fmt: skip
    assert code == 2 and err.strip() == (
        f"error: op conv2d: conv2d takes fp16/bf16/fp32/tf32/fp64 tensors (PyTorch's F.conv2d "
        f"on CUDA), not {dtype}")  # fmt: skip


def test_attention_kernels_run_where_sdpa_runs_them(capsys):
    """Flash and cuDNN attention need compute capability 8.0 (sdp_utils.cpp); cuDNN is NVIDIA's."""
    t4 = gm.predict(ops.Attention(seq=4096, dtype="fp16"), "t4")  # the default: what SDPA runs
    efficient = gm.predict(ops.Attention(seq=4096, dtype="fp16", impl="efficient"), "t4")
    assert t4.time_s == efficient.time_s
    assert "SDPA's default dispatch runs impl=efficient" in t4.explain()
    for gpu, impl in (("t4", "flash"), ("v100", "cudnn"), ("mi300x", "cudnn")):
        code, _, err = run(capsys, "predict", "attention", "--seq", "1024", "--gpu", gpu,
                           "--impl", impl, "--dtype", "fp16")  # fmt: skip
        assert code == 2 and err.count("\n") == 1 and f"impl={impl}" in err
    assert gm.predict_inference("llama-3-8b", "v100", dtype="fp16", batch=1).attention == "efficient"


def test_prefill_of_a_given_context_is_that_prompt(capsys):
    p = gm.predict_inference("llama-3-8b", "h100", phase="prefill", context=512)
    assert (p.seq, p.context) == (512, 512)
    code, out, _ = run(capsys, "infer", "--model", "llama-3-8b", "--phase", "prefill",
                       "--context", "512", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["seq"] == 512
    sweep = gm.sweep_inference("llama-3-8b", "h100", phase="prefill", context=[512, 1024])
    assert [r["seq"] for r in sweep.records()] == [512, 1024]
    assert sweep.records()[0]["time_s"] == pytest.approx(p.time_s, rel=1e-9)


def test_littles_law_uses_the_shipped_calibrations_latency(capsys):
    import yaml

    from gpumodel._paths import results_dir

    cal = yaml.safe_load((results_dir() / "h100-sxm" / "calibration.yaml").read_text())
    measured = cal["parameters"]["dram_latency_cycles"]
    code, out, _ = run(capsys, "littles-law", "--gpu", "h100", "--json")
    assert code == 0 and json.loads(out)["latency_dram_cycles"] == pytest.approx(measured)
    code, out, _ = run(capsys, "littles-law", "--gpu", "h100", "--calibration", "none", "--json")
    assert json.loads(out)["latency_dram_cycles"] == 675  # published microbenchmarks


def test_a_plan_page_lists_capacities_in_the_plans_order():
    from gpumodel.report.plan import plan_data

    plan = {"options": [{"gpu": g} for g in ("l4", "a100-sxm4-80gb", "h100-sxm")]}
    assert list(plan_data(plan)["capacity_bytes"]) == ["l4", "a100-sxm4-80gb", "h100-sxm"]


def test_small_output_fixes(capsys):
    assert gm.format_time(-1) == "-1 s" and gm.format_time(-2.5e-6) == "-2.5 µs"
    code, out, _ = run(capsys, "predict", "gemm", "--m", "64", "--n", "64", "--k", "64",
                       "--gpu", "h100,h100-sxm,h200", "--json")  # fmt: skip
    assert code == 0 and [p["gpu"] for p in json.loads(out)] == ["h100-sxm", "h200-sxm"]
    code, out, _ = run(capsys, "sweep-llm", "--model", "llama-3-8b", "--gpu", "h100",
                       "--batch", "1,2")  # fmt: skip
    assert code == 0 and "{" not in out and "host typical" in out.replace("\n", " ")


def test_a_key_given_twice_in_a_yaml_file_is_refused_not_the_last_kept(capsys, tmp_path):
    """Audit, 2026-12-01: a host profile with `name:` twice took the last silently (YAML's
    loaders keep the last value of a repeated key); a repeated efficiency or price would change
    a number. Keys may repeat across mappings, values anywhere."""
    from gpumodel._io import InputFileError, loads_yaml

    assert loads_yaml("a: {x: 1}\nb: {x: 1}\nc: [x, x]\nd: a\n", "t") == {
        "a": {"x": 1}, "b": {"x": 1}, "c": ["x", "x"], "d": "a"}  # fmt: skip
    for text, key, line in (("a: 1\na: 2\n", "a", 2), ("a: {x: 1, x: 2}\n", "x", 1),
                            ("a:\n  c: [1, {d: 1, d: 2}]\n", "d", 2)):  # fmt: skip
        with pytest.raises(InputFileError, match=f"line {line}: .* key '{key}' twice"):
            loads_yaml(text, "t")
    host = Path(gm.__file__).parent.parent / "specs/hosts/typical.yaml"
    twice = tmp_path / "twice.yaml"
    twice.write_text(host.read_text() + "name: dup\n")
    refused(capsys, "infer", "--model", "llama-3-8b", "--runtime", "hf-eager", "--host",
            str(twice), match="key 'name' twice")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# a JSON key given twice (fuzz's long-standing "silent-accept", 2026-12-01): json keeps the last


def test_a_json_key_given_twice_is_refused(capsys, tmp_path):
    """{"m": 4096, "m": 8192} priced the 8192 without a word; YAML input already refused it."""
    rows = tmp_path / "ops.jsonl"
    rows.write_text('{"op": "gemm", "m": 64, "n": 4096, "k": 4096}\n'
                    '{"op": "gemm", "m": 4096, "m": 8192, "n": 4096, "k": 4096}\n')  # fmt: skip
    refused(capsys, "batch", str(rows), "--gpu", "h100", match="ops.jsonl:2: row: the key 'm' is given twice")
    whole = tmp_path / "ops.json"
    whole.write_text('[{"op": "gemm", "m": 64, "n": 4096, "k": 4096, "dtype": "bf16", "dtype": "fp32"}]')
    refused(capsys, "batch", str(whole), "--gpu", "h100", match="the key 'dtype' is given twice")
    plan = tmp_path / "plan.json"
    plan.write_text('{"kind": "serve", "kind": "train"}')
    with pytest.raises(GpumodelError, match="the key 'kind' is given twice"):
        read_json(plan, "plan")
    # the same keys in different objects are fine, and a valid file still reads
    ok = tmp_path / "ok.json"
    ok.write_text('[{"op": "gemm", "m": 64, "n": 4096, "k": 4096}, '
                  '{"op": "gemm", "m": 128, "n": 4096, "k": 4096}]')  # fmt: skip
    code, out, _ = run(capsys, "batch", str(ok), "--gpu", "h100", "--json")
    assert code == 0 and len(json.loads(out)) == 2
