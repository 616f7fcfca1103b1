"""Audit items 5-7: `calibrate --calibration`, hand-edited trace calibration files, and the
errors around the files calibrate reads and writes.

Before: `--calibration` did not exist (docs/trace-calibration.md used it); a file with
trace.host_per_kernel_s 1e6 priced a step at 1.5e4 days, trace.runtime warp-drive was dropped
silently and a trace.gpu_id of another GPU accepted; a gzip trace cut in half said "no GPU
kernels", a gzip header alone "the file is empty"; --out /proc/x said "the old file is kept"
with none there, --out into a missing directory created it, and --out through a symbolic link
replaced the link with a file.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import pytest
import yaml

import gpumodel as gm
from gpumodel.calibration import CalibrationError, read_calibration_file
from gpumodel.cli import main
from gpumodel.tracecal import calibrate_from_trace

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
TRACE = FIXTURES / "lm_head_50257.json.gz"  # GPT-2's LM head, eager, on an H100
END = "# end of gpumodel calibration\n"


@cache
def _cal(base: str | None = None) -> gm.Calibration:
    return calibrate_from_trace(TRACE, gpu="h100", calibration=base)


def _run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err.strip()


def _one_line(rc: int, err: str) -> None:
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err


# --- item 5: --calibration -------------------------------------------------------------------


def test_calibrate_takes_a_base_calibration_as_the_library_does(capsys, tmp_path):
    out = tmp_path / "c.yaml"
    rc, _, err = _run(capsys, "calibrate", "--trace", str(TRACE), "--gpu", "h100",
                      "--calibration", "none", "--out", str(out))  # fmt: skip
    assert rc == 0, err
    scales = read_calibration_file(out).parameters.family_time_scale
    assert scales == pytest.approx(_cal("none").parameters.family_time_scale, rel=1e-12)
    # on the datasheet the GEMMs fit another scale than on the shipped H100 calibration
    assert scales["gemm/compute"] != pytest.approx(
        _cal().parameters.family_time_scale["gemm/compute"], rel=0.01)  # fmt: skip


def test_a_base_calibration_that_is_not_there_is_one_line(capsys, tmp_path):
    rc, _, err = _run(capsys, "calibrate", "--trace", str(TRACE), "--gpu", "h100",
                      "--calibration", str(tmp_path / "none.yaml"), "--out",
                      str(tmp_path / "c.yaml"))  # fmt: skip
    _one_line(rc, err)


# --- item 6: hand-edited trace sections ------------------------------------------------------


def _edited(tmp_path: Path, edit) -> Path:
    path = tmp_path / "cal.yaml"
    _cal().save(path)
    data = yaml.safe_load(path.read_text().split("\nmeasurements:")[0])
    edit(data)
    path.write_text(yaml.safe_dump(data) + "measurements: []\n" + END)
    return path


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["trace"].update(host_per_kernel_s=1e6), "host_per_kernel_s"),
    (lambda d: d["trace"].update(host_per_kernel_s=0.2), "host_per_kernel_s"),
    (lambda d: d["host_profile"].update(kernel_launch_s=1e6), "kernel_launch_s"),
    (lambda d: d["trace"]["host_op_s"].update(elementwise=1e6), "host_op_s"),
    (lambda d: d["trace"].update(runtime="warp-drive"), "runtime"),
    (lambda d: d["trace"].update(gpu_id="h200-sxm"), "trace.gpu_id"),
])  # fmt: skip
def test_a_hand_edited_trace_section_is_refused_naming_the_field(edit, field, tmp_path, capsys):
    path = _edited(tmp_path, edit)
    with pytest.raises(CalibrationError, match=field) as info:
        read_calibration_file(path)
    assert "\n" not in str(info.value)
    rc, out, err = _run(capsys, "infer", "--model", "gpt2-small", "--gpu", "h100",
                        "--calibration", str(path))  # fmt: skip
    _one_line(rc, err)
    assert "days" not in out


def test_the_bounds_are_a_host_profiles_and_a_real_file_is_inside_them(tmp_path):
    from gpumodel._validators import MAX_HOST_CALL_S

    fit = read_calibration_file(_edited(tmp_path, lambda d: None)).trace
    assert 0 < fit.host_per_kernel_s < MAX_HOST_CALL_S
    # a host per kernel of a host profile's largest call is still a file
    at_bound = _edited(tmp_path, lambda d: d["trace"].update(host_per_kernel_s=MAX_HOST_CALL_S))
    assert read_calibration_file(at_bound).trace.host_per_kernel_s == MAX_HOST_CALL_S


def test_a_calibration_carried_to_another_gpu_keeps_its_traces_gpu(tmp_path):
    """--calibration-from: the file is for the H200, its trace was the H100's; saved, it
    loads (the carry says where it came from)."""
    path = tmp_path / "h100.yaml"
    _cal().save(path)
    carried = gm.load_calibration(str(path), for_gpu="h200")
    assert carried.gpu_id == "h200-sxm" and carried.trace.gpu_id == "h100-sxm"
    again = tmp_path / "carried.yaml"
    carried.save(again)
    assert read_calibration_file(again).transferred_from == "h100-sxm"


# --- item 7: the trace read, the file written -------------------------------------------------


def test_a_gzip_trace_cut_in_half_is_said_truncated(capsys, tmp_path):
    """The eager decode trace's CPU events come first: its first half holds no kernel, and the
    reader, reading what was there, said the trace had none."""
    trace = Path(gm.__file__).parent.parent / \
        "validation/results/steps-h100-run11/trace-llama3-8b-decode-eager.json.gz"  # fmt: skip
    raw = trace.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    rc, _, err = _run(capsys, "calibrate", "--trace", str(cut), "--out", str(tmp_path / "c.yaml"))
    _one_line(rc, err)
    assert "truncated" in err and "no GPU kernels" not in err


def test_a_gzip_header_alone_is_not_an_empty_file(capsys, tmp_path):
    path = tmp_path / "head.json.gz"
    path.write_bytes(TRACE.read_bytes()[:10])  # the gzip header, no deflate data
    rc, _, err = _run(capsys, "calibrate", "--trace", str(path), "--out", str(tmp_path / "c.yaml"))
    _one_line(rc, err)
    assert "truncated or corrupt" in err and "empty" not in err


def test_out_into_a_missing_directory_is_refused_and_nothing_is_created(capsys, tmp_path):
    target = tmp_path / "no" / "such" / "c.yaml"
    rc, _, err = _run(capsys, "calibrate", "--trace", str(TRACE), "--gpu", "h100",
                      "--out", str(target))  # fmt: skip
    _one_line(rc, err)
    assert "does not exist" in err and not (tmp_path / "no").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_out_where_no_file_can_be_made_says_nothing_was_written(capsys, tmp_path):
    rc, _, err = _run(capsys, "calibrate", "--trace", str(TRACE), "--gpu", "h100",
                      "--out", "/proc/gpumodel-audit.yaml")  # fmt: skip
    _one_line(rc, err)
    assert "old file" not in err and "nothing was written" in err


def test_out_through_a_symbolic_link_replaces_its_target_and_keeps_the_link(capsys, tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text("old\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    rc, _, err = _run(capsys, "calibrate", "--trace", str(TRACE), "--gpu", "h100",
                      "--out", str(link))  # fmt: skip
    assert rc == 0, err
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert read_calibration_file(real).trace is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.yaml", "real.yaml"]
