"""AMD CDNA3 in every command (issue #19 item 4): infer, plan train and plan serve answer on the
shipped AMD GPUs with their calibration source; a GPU without occupancy rules falls back to the
datasheet roofline and says so, never a failed command."""

from __future__ import annotations

import json

import pytest

import gpumodel as gm
import gpumodel.cli.llm
from gpumodel.calibration import DATASHEET_LABEL
from gpumodel.cli import main
from gpumodel.specs import GPUSpec


def run_json(capsys, *args):
    code = main([*args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("gpu", ["mi300x", "mi325x"])
def test_infer_on_amd(capsys, gpu):
    data = run_json(capsys, "infer", "--model", "llama-3-8b", "--gpu", gpu)
    assert data["gpu"] == gpu and data["calibration"] == DATASHEET_LABEL
    assert data["step_time_s"] > 0 and data["tokens_per_s"] > 0
    # Llama-3-8B: 8,030,261,248 parameters x 2 bytes (bf16), independent of the GPU
    assert data["weights_bytes"] == pytest.approx(8_030_261_248 * 2, rel=1e-3)


def test_plan_serve_on_amd(capsys):
    data = run_json(capsys, "plan", "serve", "--model", "llama-3-8b", "--gpu", "mi300x,mi325x")
    for option in data["options"]:
        assert option["feasible"], option
        assert option["tpot_s"] > 0 and option["usd_per_million_tokens"] > 0
        assert option["calibration"] == DATASHEET_LABEL


def test_plan_train_on_amd(capsys):
    data = run_json(capsys, "plan", "train", "--model", "llama-2-7b", "--tokens", "1T",
                    "--gpu", "mi300x", "--gpus", "64")  # fmt: skip
    assert data["gpu"] == "mi300x" and data["time_s"] > 0 and data["cost_usd"] > 0
    # MI300X dense BF16 peak: 1307.4 TFLOP/s (AMD data sheet)
    assert data["peak_flops_per_gpu"] == pytest.approx(1307.4e12)
    assert DATASHEET_LABEL in json.dumps(data)


def test_gpu_without_occupancy_rules_degrades_to_the_datasheet():
    """An AMD architecture without rules: the Little's-law limit is skipped and the reason is
    in the memory term, the time is the datasheet roofline."""
    base = gm.get_gpu("mi300x").model_dump(by_alias=False)
    future = GPUSpec.model_validate({**base, "id": "fixture-cdna9", "architecture": "cdna9"})
    op = gm.ops.Kernel(flops=0, bytes=1e9, threads=1 << 20)
    p = gm.predict(op, future, "none")
    memory = next(t for t in p.terms if t.name == "memory time")
    assert "no occupancy rules for fixture-cdna9 (cdna9)" in memory.note
    # 1 GB at the 5.3 TB/s datasheet bandwidth
    assert memory.value == pytest.approx(1e9 / 5.3e12)


def test_calibration_from_carries_within_its_vendor_in_a_comparison():
    """--calibration-from h100 over NVIDIA and AMD GPUs (what the mixed-calibration warning
    advised) carries the H100's calibration to the NVIDIA ones and prices the MI300X on its
    datasheet, saying why; asked for the MI300X alone it is still an error (kernels and
    libraries differ)."""
    import gpumodel as gm
    from gpumodel.calibration import DATASHEET_LABEL
    from gpumodel.errors import CalibrationError

    plan = gm.plan_serving("llama-3-8b", ["h200", "mi300x"], rate=10, calibration_from="h100")
    cals = {o.gpu: o.calibration for o in plan.options}
    assert cals["mi300x"] == DATASHEET_LABEL and "transferred from h100-sxm" in cals["h200-sxm"]
    assert any("another vendor" in w for w in plan.warnings)
    r = gm.sweep_inference("llama-3-8b", ["h200", "mi300x"], batch=8, context=1024,
                           calibration_from="h100")  # fmt: skip
    assert any("another vendor" in w for w in r.warnings)
    with pytest.raises(CalibrationError, match="cannot transfer"):
        gm.plan_serving("llama-3-8b", "mi300x", rate=10, calibration_from="h100")
