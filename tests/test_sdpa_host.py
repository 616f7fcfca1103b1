"""What one eager SDPA call costs the host: which probe of the host profile it matches (default,
a backend forced around the call, a boolean mask, the backward) and how many kernels it launches
beside the one priced, against torch.profiler's kernel lists measured on an H200."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import gpumodel as gm
from gpumodel.errors import SpecError
from gpumodel.hostprofile import EAGER_KIND_FALLBACK, load_host

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "validation" / "results"
LAUNCHES = RESULTS / "h200-sxm" / "sdpa-launches-2026-12-01" / "sdpa-launches.json"
RUN39_HOST = RESULTS / "unseen-h200-run39" / "host-before.yaml"
REFERENCE = ROOT / "specs" / "hosts" / "reference-h100.yaml"


def _kernels(events: list[str]) -> int:
    """Launches the host pays in a profiled call: kernels, not cuDNN's Memset (its host cost is
    a fraction of a launch: gpumodel.ops.attention's notes)."""
    return sum(1 for e in events if not e.startswith("Memset"))


def _op(rec: dict, backward: bool = False) -> gm.ops.Attention:
    b, h, hkv, s, kv, d = rec["shape"]
    impl = "sdpa" if rec["backend"] == "default" else rec["backend"]
    return gm.ops.Attention(batch=b, heads=h, kv_heads=hkv, seq=s, kv_seq=kv, head_dim=d,
                            impl=impl, mask=rec["mask"], backward=backward)  # fmt: skip


def test_launch_counts_match_the_measured_kernel_lists():
    """Every call the H200 ran (4 backends x mask x 7 shapes, forward and prefill backward):
    the model's launches are torch.profiler's kernel count of one call."""
    records = json.loads(LAUNCHES.read_text())["records"]
    h200 = gm.get_gpu("h200")
    checked = 0
    for rec in records:
        if "error" in rec:  # flash takes no mask; the efficient kernel no GQA: refused there
            continue
        assert _op(rec).on(h200).host_launches(h200) == _kernels(rec["forward_kernels"]), rec
        checked += 1
        if "backward_kernels" in rec:
            op = _op(rec, backward=True).on(h200)
            assert op.host_launches(h200) == _kernels(rec["backward_kernels"]), rec
            checked += 1
    assert checked == 59  # 45 forward calls, 14 backward


def test_a_masked_flash_call_is_refused_as_torch_refuses_it():
    records = json.loads(LAUNCHES.read_text())["records"]
    refused = [r for r in records if r["backend"] == "flash" and r["mask"]]
    assert refused and all("No available kernel" in r["error"] for r in refused)
    with pytest.raises(SpecError, match="impl=flash takes no explicit attn_mask"):
        gm.ops.Attention(seq=1024, impl="flash", mask=True)


def test_the_probe_a_call_matches():
    attn = gm.ops.Attention
    h200 = gm.get_gpu("h200")
    assert attn(seq=1024).on(h200).host_kind == "sdpa"  # SDPA's own pick
    assert attn(seq=1024, mask=True).on(h200).host_kind == "sdpa_mask"
    assert attn(seq=1024, impl="cudnn").host_kind == "sdpa_forced"  # named: sdpa_kernel around it
    assert attn(seq=1024, impl="efficient", mask=True).host_kind == "sdpa_forced"
    assert attn(seq=1024, impl="flash", backward=True).host_kind == "sdpa_backward"
    # fp32 tensors get the memory-efficient kernel from the default dispatch: not forced
    assert attn(seq=1024, dtype="fp32").host_kind == "sdpa"
    assert attn(seq=1024, impl="naive").host_kind == "sdpa"


def test_a_forced_call_pays_the_forced_probe_and_its_extra_launches():
    """Run 39's host profile (measured on an H200 VM before its unseen grid): a decode call with
    cuDNN forced, batch x K/V heads 32 < 128 over 2048 keys, launches 2 kernels (its split-KV
    reduction) where the forced probe launched 1: the floor is sdpa_forced + 1 bare launch."""
    data = yaml.safe_load(RUN39_HOST.read_text())
    forced, launch = data["eager_op_s"]["sdpa_forced"], data["probe_kernels"]["sdpa_forced"]
    assert launch == 1
    cal = gm.load_calibration("h200")
    op = gm.ops.Attention(batch=1, heads=32, kv_heads=8, seq=1, kv_seq=2048, impl="cudnn")
    p = gm.predict(op, "h200", cal, host=str(RUN39_HOST))
    term = next(t for t in p.terms if t.name == "eager dispatch")
    assert term.value == pytest.approx(forced + cal.parameters.launch_host_s, rel=1e-12)
    assert "sdpa_forced call, 2 kernels against its probe's 1" in term.note
    # the same call at SDPA's default: the default probe
    default = gm.predict(op.model_copy(update={"impl": "sdpa"}), "h200", cal, host=str(RUN39_HOST))
    term = next(t for t in default.terms if t.name == "eager dispatch")
    assert term.value == pytest.approx(data["eager_op_s"]["sdpa"] + cal.parameters.launch_host_s,
                                       rel=1e-12)  # fmt: skip


def test_a_profile_from_before_the_sdpa_probes_stands_in_the_default_call(tmp_path):
    """reference-h100 has no sdpa_forced/mask/backward: the default call's figure stands in,
    the note says so, and its probe's launches are what Attention says the probe call launches
    on the profile's GPU (an H100: one kernel for the decode probe)."""
    hp = load_host(str(REFERENCE))
    assert hp.eager_op_s.sdpa_forced is None and hp.probe_kernels is None
    for kind in ("sdpa_forced", "sdpa_mask", "sdpa_backward"):
        assert EAGER_KIND_FALLBACK[kind] == "sdpa"
        assert hp.cost_s(kind) == hp.cost_s("sdpa")
    assert hp.probe_launches("sdpa") == 1
    assert hp.probe_launches("sdpa_backward") == 1  # the stand-in's: the default call's probe
    op = gm.ops.Attention(seq=256, heads=8, head_dim=64, impl="cudnn", backward=True)
    p = gm.predict(op, "h100", "none", host=str(REFERENCE))
    note = next(t.note for t in p.terms if t.name == "eager dispatch")
    assert "sdpa (sdpa_backward not measured)" in note
