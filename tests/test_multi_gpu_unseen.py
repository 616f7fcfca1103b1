"""validation/unseen/multi_gpu_unseen.py: one record per point from every GPU's records (the
slowest GPU's step, the largest GPU's peak); measurement code, tested on the CPU."""

from __future__ import annotations

import sys
from pathlib import Path

UNSEEN = Path(__file__).resolve().parents[1] / "validation" / "unseen"


def _record(steps: list[list[float]], peak: int, status: str = "ok") -> dict:
    return {"workload": "llama-3-8b", "runtime": "fused-graph", "phase": "decode",
            "policy": "bf16", "batch": 8, "seq": 2048, "context": 2048, "gpus": 2, "tp": 2,
            "status": status, "error": None if status == "ok" else "OutOfMemoryError",
            "tokens_per_step": 8, "steps_s": steps, "round_wall_per_step_s": [0.01] * len(steps),
            "round_started_s": [1.0 * i for i in range(len(steps))],
            "peak_allocated_bytes": peak, "peak_reserved_bytes": peak + 1, "traced": False,
            "details": {}, "step_s": {"median": sorted(s for r in steps for s in r)[0]}}  # fmt: skip


def test_merge_takes_each_steps_slowest_gpu_and_largest_peak(monkeypatch):
    monkeypatch.syspath_prepend(str(UNSEEN))
    sys.modules.pop("multi_gpu_unseen", None)
    import multi_gpu_unseen as mg

    gpu0 = {"records": [_record([[1.0, 4.0, 2.0], [3.0, 3.0, 3.0]], peak=10)]}
    gpu1 = {"records": [_record([[2.0, 1.0, 2.5], [1.0, 5.0, 1.0]], peak=12)]}
    (rec,) = mg.merge([gpu0, gpu1])
    assert rec["steps_s"] == [[2.0, 4.0, 2.5], [3.0, 5.0, 3.0]]
    assert rec["step_s"]["median"] == 3.0 and rec["step_s"]["n"] == 6
    assert rec["peak_allocated_bytes"] == 12 and rec["per_gpu_peak_allocated_bytes"] == [10, 12]
    assert (rec["gpus"], rec["tp"]) == (2, 2)
    gpu1["records"][0]["status"] = "oom"
    (failed,) = mg.merge([gpu0, gpu1])
    assert failed["status"] == "oom"
