"""NCCL kernels in a trace: the collective each ran, its size, the part no compute hides, in
diagnose and in calibrate --trace. Traces are written by hand (TraceBuilder) with the argument
names PyTorch records on an NCCL kernel and on its record_param_comms operator."""

from __future__ import annotations

from typing import Any

import pytest
from test_diagnose import BF16, TraceBuilder

import gpumodel as gm
from gpumodel.diagnose.comms import map_collective
from gpumodel.diagnose.parse import CpuEvent, GpuEvent
from gpumodel.diagnose.timeline import exposed_comm_us
from gpumodel.tracecal import calibrate_from_trace

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64"
ARGS = {"Collective name": "allreduce", "In msg nelems": 25_000_000,
        "Out msg nelems": 25_000_000, "Group size": 8, "dtype": "BFloat16"}  # fmt: skip


def _kernel(name: str = NCCL, args: dict[str, Any] | None = None, ts: float = 0.0,
            dur: float = 1.0, kind: str = "kernel") -> GpuEvent:  # fmt: skip
    return GpuEvent(kind=kind, name=name, ts=ts, dur=dur, device=0, stream=20, correlation=None,
                    external_id=None, args=args or {})  # type: ignore[arg-type]  # fmt: skip


def _comms_op(args: dict[str, Any]) -> CpuEvent:
    parent = CpuEvent(name="c10d::allreduce_", cat="cpu_op", ts=0, dur=9, pid=1, tid=1, args={})
    return CpuEvent(name="record_param_comms", cat="cpu_op", ts=0, dur=9, pid=1, tid=1,
                    args=args, parent=parent)  # fmt: skip


def test_an_nccl_kernel_is_its_collective_from_its_own_args_or_its_record_param_comms():
    want = gm.ops.AllReduce(bytes=50e6, gpus=8, dtype="bf16", in_graph=True)  # 25 M x 2 B
    assert map_collective(_kernel(args=ARGS), None).op == want
    # older PyTorch: the sizes only on the operator that launched it
    assert map_collective(_kernel(), _comms_op(ARGS)).op == want


@pytest.mark.parametrize(
    ("name", "n_in", "n_out", "op", "nbytes"),
    [
        # nccl-tests sizes: the gathered output, the input before scattering (4 B fp32)
        ("_allgather_base", 1_000_000, 8_000_000, gm.ops.AllGather, 32e6),
        ("_reduce_scatter_base", 8_000_000, 1_000_000, gm.ops.ReduceScatter, 32e6),
        ("broadcast", 3_000, 3_000, gm.ops.Broadcast, 12e3),
        ("send", 500, 0, gm.ops.SendRecv, 2e3),
    ],
)
def test_collective_sizes_as_nccl_tests_counts_them(name, n_in, n_out, op, nbytes):
    args = {"Collective name": name, "In msg nelems": n_in, "Out msg nelems": n_out,
            "Group size": 8, "dtype": "Float"}  # fmt: skip
    m = map_collective(_kernel("ncclDevKernel_Generic", args), None)
    assert type(m.op) is op and m.op.bytes == nbytes and m.op.dtype == "fp32"


def test_what_cannot_be_priced_says_why():
    no_sizes = map_collective(_kernel(), None)
    assert no_sizes.op is None and "no message sizes" in no_sizes.reason
    assert no_sizes.label == "nccl:all_reduce"  # the kind from the kernel's name
    barrier = map_collective(_kernel(args={**ARGS, "Collective name": "barrier"}), None)
    assert barrier.op is None and "barrier" in barrier.reason
    one_rank = map_collective(_kernel(args={**ARGS, "Group size": 1}), None)
    assert one_rank.op is None and "1 rank" in one_rank.reason
    # 16 ranks: two nodes of 8, said
    two_nodes = map_collective(_kernel(args={**ARGS, "Group size": 16}), None)
    assert two_nodes.op.nodes == 2 and "2 nodes of 8" in two_nodes.notes[0]


def test_exposed_time_is_the_nccl_time_with_nothing_else_beside_it():
    a, b = _kernel(ts=0, dur=10), _kernel(ts=5, dur=7)  # NCCL kernels 0-10 and 5-12
    others = [_kernel(GEMM, ts=2, dur=2), _kernel(GEMM, ts=8, dur=12), _kernel("x", ts=30)]
    # a: 10 us less 2-4 and 8-10 = 6; b: only 10-12 is new, under the GEMM of 8-20 = 0
    assert exposed_comm_us([b, a], [*others, a, b]) == {id(a): 6.0, id(b): 0.0}
    # a copy hides communication too; nothing beside it: all of it is exposed
    copy = _kernel("Memcpy DtoD", ts=0, dur=10, kind="memcpy")
    assert exposed_comm_us([a], [copy]) == {id(a): 0.0}
    assert exposed_comm_us([a], []) == {id(a): 10.0}


def ddp_trace(steps: int = 3, on_kernel: bool = True) -> TraceBuilder:
    """Each step: three 1 ms GEMMs on the compute stream; an all-reduce of 50 MB over 8 ranks
    starts half-way through the second and ends 1 ms after the third (2.5 ms), and the next
    step waits for it: 1.5 ms hidden, 1 ms exposed per step."""
    tb = TraceBuilder()
    for s in range(steps):
        with tb.range(f"ProfilerStep#{s}", cat="user_annotation"):
            for _ in range(3):
                tb.op("aten::mm", [[8192, 4096], [4096, 4096]], [BF16, BF16], [(GEMM, 1000.0)])
            gemms = [e for e in tb.events if e["cat"] == "kernel"][-3:]
            with tb.range("record_param_comms"):
                tb.launch(NCCL, 2500.0, args=ARGS if on_kernel else {})
            tb.events[-1]["args"].update(ARGS)  # the operator records them on every version
            kernel = next(e for e in reversed(tb.events) if e["cat"] == "kernel")
            kernel["ts"] = gemms[1]["ts"] + 500.0
            kernel["tid"] = kernel["args"]["stream"] = 20
            tb.gpu = kernel["ts"] + kernel["dur"]
    return tb


@pytest.mark.parametrize("on_kernel", [True, False])
def test_diagnose_prices_the_all_reduce_and_finds_its_exposed_millisecond(on_kernel):
    r = gm.diagnose(ddp_trace(on_kernel=on_kernel).to_dict())
    comm = next(f for f in r.findings if f.kind == "comm_exposed")
    assert comm.recoverable_s == pytest.approx(1e-3)  # per step, by the construction
    assert comm.details["nccl_ms_per_step"] == pytest.approx(2.5)
    model = gm.predict(gm.ops.AllReduce(bytes=50e6, gpus=8, dtype="bf16", in_graph=True),
                       "h100")  # fmt: skip
    assert comm.details["model_ms_per_step"] == pytest.approx(model.time_s * 1e3)
    row = next(o for o in r.ops if o.name == "nccl:all_reduce")
    assert row.mapped and row.count == 3 and row.predicted_per_call_s == pytest.approx(model.time_s)
    assert row.recoverable_s == 0.0  # what the step pays of it is the finding's
    # the GEMMs are judged at the compute's own activity, not diluted by the NCCL stream
    gemm = next(o for o in r.ops if o.name == "aten::mm")
    assert gemm.recoverable_s > 0


def test_calibrate_keeps_collectives_out_of_the_fit_and_counts_only_their_exposed_time(
    tmp_path,
):  # fmt: skip
    path = ddp_trace().write(tmp_path / "ddp.json")
    cal = calibrate_from_trace(path)
    fit = cal.trace
    assert not any(f.key.startswith("all_reduce") for f in fit.families)
    assert fit.matched_fraction == pytest.approx(1.0)
    # 3 GEMMs (3 ms) and the exposed 1 ms of the 2.5 ms all-reduce
    assert fit.gpu_busy_s == pytest.approx(4e-3)
    assert fit.self_check["gpu_busy_measured_s"] == pytest.approx(4e-3)
    note = next(n for n in fit.notes if n.startswith("collectives:"))
    assert "1 NCCL kernels per step, 2.5 ms, 1 ms of it" in note


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        ({"In msg nelems": "many"}, "not understood"),
        ({"Group size": None}, "not understood"),
        ({"In msg nelems": -5}, "nothing moves"),
        ({"Group size": 0}, "nothing moves"),
        ({"dtype": "ComplexFloat"}, "dtype 'ComplexFloat'"),
        ({"In msg nelems": 10**30}, "not priced"),  # past 1 EiB: no GPU holds it
        ({"Collective name": "gather"}, "no known collective"),
    ],
)
def test_hostile_collective_arguments_are_reasons_not_errors(update, reason):
    m = map_collective(_kernel("ncclDevKernel_Generic", {**ARGS, **update}), None)
    assert m.op is None and reason in m.reason


def test_a_world_size_stands_in_for_a_missing_group_size():
    m = map_collective(_kernel(args={**ARGS, "Group size": -1}), None, world_size=4)
    assert m.op.gpus == 4
