"""How wrong a prediction is expected to be, from measurements the model was never fitted to.

Every prediction of a kernel, an LLM step or a training step carries ``accuracy``: the error the
model as it ships scores on a class of measured workloads like it (same kind of op, dtype,
condition, GPU and calibration), or None where nothing like it was measured. Two bases:

* ``unseen``: the unseen sets (``validation/unseen/``: PyTorch's own kernels, HF models' steps,
  timed as users time them on H100 and H200 VMs by scripts that share no code with the fit),
  scored by ``validation/unseen/evaluate.py`` with the shipped calibrations and pooled per class
  into ``validation/results/accuracy/accuracy.json`` by ``validation/unseen/accuracy_table.py``.
  It applies where the prediction uses the calibration that table was scored with: a GPU's own
  shipped calibration, or the H100's carried to the H200.
* ``held-out``: where no unseen class applies (your own ``gpumodel validate`` run, or an op the
  unseen sets do not cover) and the calibration was measured on this GPU: the held-out error of
  the op's family on that calibration's own points (``Calibration.errors``; validate's harness,
  not a user's workload, so a lower bound on the error in one).

A prediction from the datasheet alone, from a calibration carried to a GPU no set measured, or
of an op nothing covers has none: the model does not claim an error it has not measured.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict

from gpumodel._validators import Checked

if TYPE_CHECKING:
    from gpumodel.calibration import Calibration
    from gpumodel.ops.base import Op

TABLE_FILE = "accuracy/accuracy.json"
TABLE_VERSION = 1
# the fewest scored points a class needs to stand for a prediction (fewer: the broader class)
MIN_KERNEL_POINTS = 20
MIN_STEP_POINTS = 5
# head dims the unseen SDPA grids measured, per tensor dtype (validation/unseen/kernels_unseen.py)
MEASURED_HEAD_DIMS = {"fp16": (40, 256), "bf16": (40, 256), "fp32": (32, 128)}


class Accuracy(Checked):
    """The measured error of predictions like one: |predicted / measured - 1| in percent."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    basis: Literal["unseen", "held-out"]
    what: str  # the class of workloads the figures pool
    measured_on: str  # GPU id of the measurements
    calibration: str  # the calibration they were predicted with
    median_abs_pct: float
    p90_abs_pct: float
    bias_pct: float  # median signed error: > 0 means the model predicts too slow
    n: int  # scored points
    runs: int = 1  # machines (device calls) they came from
    run_median_range_pct: tuple[float, float] | None = None  # lowest and highest run median
    source: str

    hint: str | None = None  # how to get a smaller error, where the sets measured one

    def summary(self) -> str:
        """One line: '3.2% median, p90 12% (bias -1.5%) over 385 unseen points, 8 runs ...'."""
        runs = f", {self.runs} runs" if self.runs > 1 else ""
        if self.run_median_range_pct and self.runs > 1:
            lo, hi = self.run_median_range_pct
            runs += f" (run medians {lo:.1f}-{hi:.1f}%)"
        text = (f"{self.median_abs_pct:.1f}% median, p90 {self.p90_abs_pct:.0f}% (bias "
                f"{self.bias_pct:+.1f}%) over {self.n} {self.basis} points{runs}: {self.what}; "
                f"measured on {self.measured_on}, {self.calibration} calibration "
                f"[{self.source}]")  # fmt: skip
        return f"{text}. {self.hint}" if self.hint else text


def measured_host(hp: Any) -> bool:
    """Whether a prediction's host profile stands for its machine (one measured there, by
    ``gpumodel validate --host-only``): the sets' "+ host profile" figures hold for those, not
    for the shipped typical or reference hosts, which a prediction assumes when none is found."""
    from gpumodel.hostprofile import SHIPPED_REFERENCE_HOSTS

    return hp is not None and hp.name not in SHIPPED_REFERENCE_HOSTS


#: the GEMM dtypes the unseen sets time (torch.matmul, torch._scaled_mm): the pooled GEMM
#: class speaks for these only
MEASURED_GEMM_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")


def kernel_classes(op: Op) -> list[str]:
    """The unseen sets' classes of ``op``, most specific first (empty: none covers it)."""
    name = getattr(op, "op_name", "")
    if name == "gemm":
        dtype = op.dtype  # type: ignore[attr-defined]
        out = []
        if op.n % 8 or op.k % 8:  # type: ignore[attr-defined]
            out.append("gemm:misaligned")
        if op.m <= 128:  # type: ignore[attr-defined]
            out.append(f"gemm:{dtype}:m<=128")
        if dtype not in MEASURED_GEMM_DTYPES:  # no unseen point of its kind (int8, fp4)
            return []
        return [*out, f"gemm:{dtype}", "gemm"]
    if name == "conv2d":
        return [f"conv2d:{op.dtype}:{op.layout}", f"conv2d:{op.dtype}", "conv2d"]  # type: ignore[attr-defined]
    if name == "attention":
        # 16-bit tensors (cuDNN, flash, memory-efficient) pool, head dims above 128 (other
        # kernels) apart too; fp32 runs its own 3xTF32 kernel; decode (one query against a KV
        # cache, other kernels again) per kernel. Head dims outside the measured ones: none.
        dtype = {"fp32": "fp32", "tf32": "fp32"}.get(op.dtype, op.dtype)  # type: ignore[attr-defined]
        lo, hi = MEASURED_HEAD_DIMS.get(dtype, (0, -1))
        if not lo <= op.head_dim <= hi:  # type: ignore[attr-defined]
            return []
        if op.seq == 1 and not op.backward:  # type: ignore[attr-defined]
            decode = f"attention:decode:{op.impl}"  # type: ignore[attr-defined]
            return [decode, "attention:decode"] if dtype in ("fp16", "bf16") else [f"{decode}:{dtype}"]
        base = "attention:backward" if op.backward else "attention"  # type: ignore[attr-defined]
        if dtype not in ("fp16", "bf16"):
            return [] if op.backward else [f"attention:{dtype}"]  # type: ignore[attr-defined]
        from gpumodel.ops.attention import WIDE_HEAD_DIM

        wide = op.head_dim > WIDE_HEAD_DIM  # type: ignore[attr-defined]
        mask = op.mask  # type: ignore[attr-defined]
        return [*([f"{base}:masked"] if mask else []), *([f"{base}:wide"] if wide else []), base]
    if name == "host_transfer":
        pinned = "pinned" if op.pinned else "pageable"  # type: ignore[attr-defined]
        return [f"host_transfer:{op.direction}:{pinned}", "host_transfer"]  # type: ignore[attr-defined]
    return []


def parallel_layout(*, tp: int = 1, pp: int = 1, dp: int = 1, zero: int = 0) -> str | None:
    """The unseen step sets' name of how a step spreads over GPUs: ``""`` (one GPU), ``"tp 2"``
    (tensor parallel), ``"ddp 2"`` (data parallel, ZeRO 0: PyTorch DDP), ``"fsdp 2"`` (ZeRO 3:
    FSDP); None for a layout no set measured (ZeRO 1-2, pipelines, several kinds at once).
    Replicas of a served model do not change a step: pass its ``tp`` alone."""
    if pp != 1 or (tp > 1 and dp > 1):
        return None
    if tp > 1:
        return f"tp {tp}"
    if dp > 1:
        return {0: f"ddp {dp}", 3: f"fsdp {dp}"}.get(zero)
    return ""


def step_class(runtime: str, phase: str, policy: str | None = None, layout: str = "") -> str:
    """The unseen step sets' class of a step: ``"hf-eager decode"``, ``"train amp"``,
    ``"train bf16, fsdp 2"`` (``layout``: :func:`parallel_layout`)."""
    base = f"train {policy}" if phase == "train" else f"{runtime} {phase}"
    return f"{base}, {layout}" if layout else base


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any] | None:
    """The shipped table, its entries indexed by (kind, class, gpu, calibration, condition,
    host) under ``"index"`` (None where it is missing or of another version)."""
    import json

    from gpumodel import _paths

    path = _paths.results_dir() / TABLE_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))  # shipped with the package, not input
    if not isinstance(data, dict) or data.get("accuracy_table") != TABLE_VERSION:
        return None
    data["index"] = {(e["kind"], e["class"], e["gpu"], e["calibration"], e["condition"],
                      e["host"]): e for e in data.get("entries", [])}  # fmt: skip
    return data


def _calibration_kind(cal: Calibration | None, gpu_id: str, table: dict[str, Any]) -> str | None:
    """``"own"`` or ``"from <gpu>"`` where ``cal`` is the calibration the table was scored
    with (its GPU and creation time), else None."""
    if cal is None or cal.trace is not None:
        return None
    source = cal.transferred_from or cal.gpu_id
    if cal.gpu_id != gpu_id:
        return None
    scored = (table.get("calibrations") or {}).get(source) or {}
    if str(scored.get("created")) != cal.created.isoformat():
        return None
    return f"from {source}" if cal.transferred_from else "own"


def _lookup(kind: str, classes: list[str], gpu_id: str, cal_kind: str, condition: str,
            host: bool, least: int) -> Accuracy | None:  # fmt: skip
    table = _table()
    if table is None:
        return None
    for cls in classes:
        e = table["index"].get((kind, cls, gpu_id, cal_kind, condition, host))
        if e is not None and e["n"] >= least:
            label = "its own shipped" if cal_kind == "own" else f"the {cal_kind.split()[-1]}'s"
            rng = e.get("run_median_range_pct")
            return Accuracy(basis="unseen", what=e["what"], measured_on=gpu_id,
                            calibration=label,
                            median_abs_pct=e["median_abs_pct"], p90_abs_pct=e["p90_abs_pct"],
                            bias_pct=e["bias_pct"], n=e["n"], runs=e["runs"],
                            run_median_range_pct=tuple(rng) if rng else None,
                            source=f"validation/results/{TABLE_FILE}")  # fmt: skip
    return None


# validate's held-out families (``Calibration.errors`` keys) of an op, most specific first
HELD_OUT_FAMILIES = {
    "elementwise": ["elementwise / reduction"], "reduction": ["elementwise / reduction"],
    "layernorm": ["layer/RMS norm, softmax"], "rmsnorm": ["layer/RMS norm, softmax"],
    "softmax": ["layer/RMS norm, softmax"], "copy": ["copy (cudaMemcpy d2d)"],
    "expand_copy": ["expand copy (repeat_kv)"],
    "strided_elementwise": ["strided elementwise (casts, broadcasts)"],
    "adamw": ["optimizer (fused AdamW)"], "host_transfer": ["host transfer"],
}  # fmt: skip


def _held_out_families(op: Op) -> list[str]:
    name = getattr(op, "op_name", "")
    if name == "gemm":
        if op.dtype not in MEASURED_GEMM_DTYPES:  # type: ignore[attr-defined]
            return []  # validate times no int8 or fp4 product either
        odd = op.n % 8 or op.k % 8  # type: ignore[attr-defined]
        return [*(["gemm misaligned N or K (A @ B and x @ W.T)"] if odd else []),
                "gemm (all shapes)"]  # fmt: skip
    if name == "conv2d":
        fp32 = op.dtype == "fp32"  # type: ignore[attr-defined]
        return [*(["conv2d fp32 (cuDNN, CUDA cores)"] if fp32 else []), "conv2d (cuDNN)"]
    if name == "attention":
        from gpumodel.ops.attention import WIDE_HEAD_DIM

        if op.dtype not in ("fp16", "bf16") or op.head_dim > WIDE_HEAD_DIM:  # type: ignore[attr-defined]
            return []  # validate times 16-bit attention at head dims 64 and 128 only
        impl = "cuDNN" if op.impl == "cudnn" else "flash"  # type: ignore[attr-defined]
        if op.backward:  # type: ignore[attr-defined]
            return [f"attention backward ({impl})"]
        if op.seq == 1:  # type: ignore[attr-defined]
            return ["attention decode (cuDNN)" if impl == "cuDNN" else "attention decode"]
        return [f"attention prefill ({impl})"]
    return HELD_OUT_FAMILIES.get(name, [])


def kernel_accuracy(op: Op, gpu_id: str, cal: Calibration | None, condition: str,
                    host: bool) -> Accuracy | None:  # fmt: skip
    """The measured error of predictions like ``gm.predict(op, gpu, cal, condition=...)``."""
    table = _table()
    kind = _calibration_kind(cal, gpu_id, table) if table else None
    classes = kernel_classes(op)
    if kind is not None and classes:
        found = _lookup("kernel", classes, gpu_id, kind, condition, host, MIN_KERNEL_POINTS)
        if found is not None:
            return found
    if cal is None or cal.transferred_from or cal.trace is not None:
        return None
    for fam in _held_out_families(op):  # no unseen class: the calibration's own held-out points
        err = cal.errors.get(fam)
        if err is not None:
            return Accuracy(basis="held-out", what=f"{fam} (validate's harness)",
                            measured_on=cal.gpu_id,
                            calibration=cal.label, median_abs_pct=err.median_abs_pct,
                            p90_abs_pct=err.p90_abs_pct, bias_pct=err.bias_pct or 0.0, n=err.n,
                            source="gpumodel validate's held-out points")  # fmt: skip
    return None


def step_accuracy(runtime: str, phase: str, gpu_id: str, cal: Calibration | None, host: bool,
                  *, policy: str | None = None, layout: str | None = "",
                  metric: str = "time") -> Accuracy | None:  # fmt: skip
    """The measured error of whole-step predictions like this one. ``metric``: ``time`` (a
    steady-state step), ``time, first round`` (a step at new shapes: ``new_shapes=True``) or
    ``peak memory`` (training). ``layout``: how the step spreads over GPUs
    (:func:`parallel_layout`; None, a layout no set measured: no figure)."""
    table = _table()
    kind = _calibration_kind(cal, gpu_id, table) if table and layout is not None else None
    if kind is None:
        return None
    classes = [step_class(runtime, phase, policy, layout or "")]
    found = _lookup(f"step {metric}", classes, gpu_id, kind, "in-workload", host, MIN_STEP_POINTS)
    hosted = None if host or found is None else _lookup(
        f"step {metric}", classes, gpu_id, kind, "in-workload", True, MIN_STEP_POINTS)  # fmt: skip
    if hosted is not None and hosted.median_abs_pct < found.median_abs_pct:  # type: ignore[union-attr]
        hint = (f"With this machine's host measured (gpumodel validate --host-only, then --host): "
                f"{hosted.median_abs_pct:.1f}% median, p90 {hosted.p90_abs_pct:.0f}%")  # fmt: skip
        found = found.model_copy(update={"hint": hint})  # type: ignore[union-attr]
    return found
