"""Property-based checks (hypothesis) of issue #20's guarantees over generated valid and invalid
inputs: every CLI command exits 0 or 2 (never a traceback, hang or MemoryError) and prints no
NaN/inf or negative time; every public function returns finite positive numbers or raises a
GpumodelError; every file reader turns hostile bytes into a GpumodelError; a write that fails
(a full disk, a kill mid-write) leaves the old file and no temp file.

Budget: the "ci" profile (default here; max_examples per test below, no deadline, derandomized
so a run is reproducible) is sized to run this file in under 2 minutes on the 2-core dev machine. Set
HYPOTHESIS_PROFILE=long for a deeper local run. Monotonicity and predict == sweep are
issue #20 item 3's own tests.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpumodel as gm
from gpumodel import ops
from gpumodel._io import OutputFileError, atomic_write_bytes
from gpumodel.errors import GpumodelError

sys.path.insert(0, str(Path(__file__).parent))
import cli_cases

settings.register_profile(
    "ci", deadline=None, derandomize=True, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)  # fmt: skip
settings.register_profile("long", parent=settings.get_profile("ci"), derandomize=False,
                          max_examples=2000)  # fmt: skip
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"


def examples(n: int) -> settings:
    return settings(max_examples=2000 if LONG else n)


# ---------------------------------------------------------------------------------------------
# values: what a hostile user passes for a number


SIZES = st.one_of(
    st.integers(1, 8192),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 2**53, 2**53 + 1, 2**63, 2**64, 10**12]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["4096", "", "x", "١٢", None, True, [], {}, 1.5]),
)
POSITIVE_FLOATS = st.one_of(st.floats(1e-6, 1e12), st.floats(allow_nan=True, allow_infinity=True),
                            st.sampled_from([0.0, -1.0, 1e-300, 1e30, "1", None, True]))  # fmt: skip
GPUS = st.sampled_from(["h100", "a100", "h200", "l4", "mi300x", "t4", "b200"])


def finite_positive(x: float) -> bool:
    return isinstance(x, float | int) and math.isfinite(x) and x > 0


# ---------------------------------------------------------------------------------------------
# the CLI: every command, valid and hostile options


CLI = cli_cases.commands()


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    path, cmd = draw(st.sampled_from(CLI))
    hostile_rate = draw(st.sampled_from([0.0, 0.0, 0.15, 0.5]))

    def choose(kind: str, key: str, pool: list[str] | None) -> object:
        if kind == "include":
            return draw(st.booleans())
        if kind == "hostile":
            return hostile_rate > 0 and draw(st.floats(0, 1)) < hostile_rate
        return draw(st.sampled_from(pool))

    return cli_cases.build_argv(path, cmd, choose)


@examples(40)
@given(argv=command_lines())
def test_every_command_exits_0_or_2_with_sane_output(argv):
    outcome = cli_cases.run_cli(argv, limit_s=60)
    assert outcome.kind in ("ok", "error"), f"{outcome.kind}: {argv}\n{outcome.detail}"


@pytest.mark.parametrize("path", [" ".join(p) for p, _ in CLI])
def test_every_command_runs_with_defaults_or_refuses_cleanly(path):
    # each command once with its required arguments at valid values
    cmd = dict(CLI)[tuple(path.split())]
    argv = cli_cases.build_argv(tuple(path.split()), cmd,
                                lambda kind, key, pool: False if kind != "pick" else pool[0])  # fmt: skip
    outcome = cli_cases.run_cli(argv, limit_s=60)
    assert outcome.kind in ("ok", "error"), f"{outcome.kind}: {argv}\n{outcome.detail}"


# ---------------------------------------------------------------------------------------------
# the library: ops through predict


OPS = {
    "gemm": (ops.Gemm, ("m", "n", "k")),
    "copy": (ops.Copy, ("bytes",)),
    "relu": (lambda **kw: ops.Elementwise(op="relu", **kw), ("n",)),
    "attention": (lambda **kw: ops.Attention(head_dim=128, **kw), ("batch", "heads", "seq")),
    "layernorm": (ops.LayerNorm, ("rows", "hidden")),
    "rmsnorm": (ops.RMSNorm, ("rows", "hidden")),
    "softmax": (ops.Softmax, ("rows", "cols")),
    "reduction": (ops.Reduction, ("n",)),
    "kernel": (ops.Kernel, ("flops", "bytes")),
    "all_reduce": (ops.AllReduce, ("bytes", "gpus")),
    "all_gather": (ops.AllGather, ("bytes", "gpus")),
    "embedding": (ops.Embedding, ("tokens", "hidden")),
}


@st.composite
def op_inputs(draw: st.DrawFn) -> tuple[str, dict]:
    name = draw(st.sampled_from(sorted(OPS)))
    _, fields = OPS[name]
    valid = draw(st.booleans())
    values = {f: draw(st.integers(1, 1 << 14) if valid else SIZES) for f in fields}
    if name in ("all_reduce", "all_gather") and valid:
        values["gpus"] = draw(st.integers(1, 1024))
    return name, values


@examples(60)
@given(case=op_inputs(), gpu=GPUS, cal=st.sampled_from(["none", None]),
       l2=st.sampled_from(["cold", "warm", "hot", ""]))  # fmt: skip
def test_predict_returns_finite_positive_or_refuses(case, gpu, cal, l2):
    name, values = case
    make, _ = OPS[name]
    try:
        p = gm.predict(make(**values), gpu, cal, l2=l2)
    except GpumodelError:
        return
    assert l2 in ("cold", "warm")
    if name.startswith("all_") and values["gpus"] == 1:  # one GPU communicates nothing: 0 s
        assert p.time_s == 0.0
    else:
        assert finite_positive(p.time_s), (name, values, p.time_s)
    assert all(math.isfinite(t.value) for t in p.terms), (name, values)


@examples(60)
@given(m=st.lists(SIZES, min_size=0, max_size=4), gpu=GPUS,
       dtype=st.sampled_from(["bf16", "fp8", "", "bf17"]))  # fmt: skip
def test_sweep_checks_its_arrays(m, gpu, dtype):
    try:
        out = gm.sweep("gemm", gpu, "none", m=m, n=4096, k=4096, dtype=dtype)
    except GpumodelError:
        return
    import numpy as np

    assert np.all(np.isfinite(out["time_s"])) and np.all(out["time_s"] > 0)


# ---------------------------------------------------------------------------------------------
# the library: planning functions


@examples(60)
@given(batch=SIZES, context=SIZES, tp=SIZES, dtype=st.sampled_from(["bf16", "fp8", ""]),
       phase=st.sampled_from(["decode", "prefill", "x"]))  # fmt: skip
def test_predict_inference_finite_or_refuses(batch, context, tp, dtype, phase):
    try:
        r = gm.predict_inference("llama-3-8b", "h100", phase=phase, batch=batch, context=context,
                                 tp=tp, gpus=tp, dtype=dtype, calibration="none")  # fmt: skip
    except GpumodelError:
        return
    assert finite_positive(r.step_time_s)


@examples(40)
@given(gpus=SIZES, global_batch=st.one_of(st.none(), SIZES), micro_batch=SIZES)
def test_training_step_finite_or_refuses(gpus, global_batch, micro_batch):
    try:
        r = gm.predict_training_step("llama-2-7b", "h100", gpus, global_batch=global_batch,
                                     micro_batch=micro_batch, calibration="none")  # fmt: skip
    except GpumodelError:
        return
    assert finite_positive(r.step_time_s)


@examples(40)
@given(tokens=POSITIVE_FLOATS, price=st.one_of(st.none(), POSITIVE_FLOATS), gpus=SIZES)
def test_plan_training_finite_or_refuses(tokens, price, gpus):
    try:
        p = gm.plan_training("llama-2-7b", "h100", gpus, tokens, price=price, mfu=0.4)
    except GpumodelError:
        return
    assert finite_positive(p.days)
    # a price of 1e-300 $/h passes the bound (> 0) and costs 0.0: open, see docs/hardening.md
    assert p.cost_usd is None or (math.isfinite(p.cost_usd) and p.cost_usd >= 0)


@examples(40)
@given(batch=st.lists(SIZES, max_size=3), tp=st.lists(SIZES, max_size=3))
def test_llm_sweeps_check_their_arrays(batch, tp):
    import numpy as np

    try:
        r = gm.sweep_inference("llama-3-8b", "h100", batch=batch, tp=tp, calibration="none")
    except GpumodelError:
        return
    assert np.all(np.isfinite(r["time_s"])) and np.all(r["time_s"] > 0)


@examples(40)
@given(p=POSITIVE_FLOATS, n=st.one_of(SIZES, st.lists(SIZES, max_size=4)))
def test_amdahl_finite_or_refuses(p, n):
    try:
        r = gm.amdahl(p, n)
    except GpumodelError:
        return
    values = r.speedup if isinstance(r.speedup, list | tuple) else [r.speedup]
    assert all(finite_positive(float(v)) for v in values)


@examples(30)
@given(compute=POSITIVE_FLOATS, grad=POSITIVE_FLOATS, gpus=SIZES, bucket=POSITIVE_FLOATS)
def test_data_parallel_step_finite_or_refuses(compute, grad, gpus, bucket):
    try:
        s = gm.data_parallel_step(compute, grad, gpus, "h100", bucket_bytes=bucket,
                                  calibration="none")  # fmt: skip
    except GpumodelError:
        return
    for v in (s.step_none_s, s.step_bucketed_s, s.step_perfect_s):
        assert math.isfinite(v) and v >= 0
    assert s.step_perfect_s <= s.step_bucketed_s * (1 + 1e-9)


@examples(60)
@given(grad=st.floats(1e3, 1e11), bucket=st.floats(1e2, 1e9),
       first=st.one_of(st.none(), st.floats(1e2, 1e8)), alpha=st.floats(0, 1e-3),
       beta=st.floats(1e-13, 1e-8), fwd=st.floats(0, 1), bwd=st.floats(0, 2))  # fmt: skip
def test_bucket_closed_form_equals_the_timeline(grad, bucket, first, alpha, beta, fwd, bwd):
    # the closed form over runs of equal buckets == the bucket-by-bucket simulation
    from gpumodel.model import amdahl as a

    runs = a.bucket_runs(grad, bucket, first)
    if sum(n for _, n in runs) > 20_000:
        return
    sizes = a.bucket_sizes(grad, bucket, first)
    end, events = a.simulate_buckets(fwd, bwd, sizes, lambda s: alpha + beta * s)
    total = 0.0
    prev = 0.0
    for size, n in runs:
        t = alpha + beta * size
        total_before = total
        total += size * n
        r0 = fwd + bwd * (total_before + size) / grad
        prev = max(prev + n * t, r0 + n * t, fwd + bwd * total / grad + t)
    closed = max(fwd + bwd, prev)
    assert closed == pytest.approx(end, rel=1e-9, abs=1e-15)
    old = a.MAX_BUCKET_EVENTS
    a.MAX_BUCKET_EVENTS = -1  # force the closed form in the library too
    try:
        lib_end, comm, _ = a.simulate_bucket_runs(fwd, bwd, runs, lambda s: alpha + beta * s)
    finally:
        a.MAX_BUCKET_EVENTS = old
    assert lib_end == pytest.approx(end, rel=1e-9, abs=1e-15)
    assert comm == pytest.approx(sum(e.end_s - e.start_s for e in events), rel=1e-9, abs=1e-15)


# ---------------------------------------------------------------------------------------------
# file readers: hostile bytes


HOSTILE_DOCS = st.one_of(
    st.binary(max_size=2048),
    st.text(max_size=2048).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.integers(1, 5000).map(lambda d: ("[" * d + "]" * d).encode()),
    st.integers(1, 5000).map(lambda d: ("a:\n" + "  " * d + "- x\n").encode()),
    st.integers(1, 3000).map(lambda d: ("a: " + "[" * d + "]" * d + "\n").encode()),
    st.just(b"a: &a [1,2]\nb: [*a,*a,*a]\n"),
    st.just(b"\x1f\x8b\x08\x00" + b"\x00" * 64),
    st.sampled_from([b"", b"{}", b"[]", b"null", b"- 1\n", b"id: x\n", b"\xef\xbb\xbf{}",
                     b'{"op": "gemm", "m": 1e999}', b'{"traceEvents": [{"dur": NaN}]}']),
)  # fmt: skip


def _readers():
    from gpumodel.batchio import read_rows
    from gpumodel.diagnose import load_trace

    return {
        "spec.yaml": gm.load_spec_file,
        "system.yaml": gm.load_system_file,
        "calibration.yaml": gm.load_calibration,
        "batch.jsonl": read_rows,
        "batch.json": read_rows,
        "batch.yaml": read_rows,
        "batch.csv": read_rows,
        "trace.json": lambda p: gm.diagnose(load_trace(p), gpu="h100"),
    }


READERS = _readers()


@examples(60)
@given(name=st.sampled_from(sorted(READERS)), data=HOSTILE_DOCS)
def test_every_reader_turns_hostile_bytes_into_one_error(tmp_path_factory, name, data):
    path = tmp_path_factory.mktemp("in") / name
    path.write_bytes(data)
    try:
        READERS[name](path)
    except GpumodelError:
        pass


# ---------------------------------------------------------------------------------------------
# writes: a failure at any point keeps the old file and leaves nothing beside it


@examples(30)
@given(data=st.binary(max_size=1 << 16), fail_at=st.sampled_from(["write", "fsync", "replace",
                                                                   "kill"]),
       umask=st.sampled_from([0o022, 0o002, 0o077, 0o027]))  # fmt: skip
def test_writes_lose_nothing(tmp_path_factory, data, fail_at, umask):
    import builtins

    d = tmp_path_factory.mktemp("out")
    target = d / "calibration.yaml"
    target.write_bytes(b"old contents\n")

    class Failing:
        def __init__(self, real):
            self.real = real

        def __enter__(self):
            self.real.__enter__()
            return self

        def __exit__(self, *exc):
            return self.real.__exit__(*exc)

        def write(self, b):
            if fail_at == "kill":
                raise KeyboardInterrupt  # SIGINT / SIGTERM mid-write
            raise OSError(errno.ENOSPC, "No space left on device")

    real_open, real_fsync, real_replace = builtins.open, os.fsync, os.replace

    def fake_open(file, mode="r", *a, **k):
        fh = real_open(file, mode, *a, **k)
        return Failing(fh) if "w" in mode and fail_at in ("write", "kill") else fh

    def bad(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    old_umask = os.umask(umask)
    try:
        builtins.open = fake_open
        if fail_at == "fsync":
            os.fsync = bad
        if fail_at == "replace":
            os.replace = bad
        with pytest.raises(KeyboardInterrupt if fail_at == "kill" else OutputFileError):
            atomic_write_bytes(target, data)
    finally:
        builtins.open, os.fsync, os.replace = real_open, real_fsync, real_replace
        os.umask(old_umask)
    assert target.read_bytes() == b"old contents\n"
    assert [p.name for p in d.iterdir()] == ["calibration.yaml"]
    # and without a failure: the new bytes, the umask's mode
    old_umask = os.umask(umask)
    try:
        atomic_write_bytes(target, data)
    finally:
        os.umask(old_umask)
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in d.iterdir()] == ["calibration.yaml"]
