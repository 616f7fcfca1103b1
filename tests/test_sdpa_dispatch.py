"""``Attention``'s default kernel is the one PyTorch's SDPA picks on the GPU (``impl="sdpa"``):
checked against the kernels SDPA's default dispatch launched on real H100s and H200s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.cli import main
from gpumodel.errors import UnsupportedError
from gpumodel.ops import Attention
from gpumodel.ops.attention import sdpa_dispatch

RESULTS = Path(__file__).resolve().parent.parent / "validation" / "results"
# unseen kernel sets whose default SDPA calls recorded the kernels they launched
# (kernels_unseen.py: backend_used, read from the kernel names)
MEASURED = {"h100": ["unseen-h100", "unseen-h100-run3"], "h200": ["unseen-h200-run36", "unseen-h200-run37"]}


def default_calls(gpu: str) -> list[dict]:
    out = []
    for run in MEASURED[gpu]:
        records = json.loads((RESULTS / run / "unseen.json").read_text())["records"]
        out += [r for r in records if r.get("family") == "sdpa"
                and r.get("backend_requested") == "default" and r.get("pass") != "backward"]  # fmt: skip
    return out


@pytest.mark.parametrize("gpu", sorted(MEASURED))
def test_the_default_is_the_kernel_sdpa_ran_on_every_measured_call(gpu):
    """Prefill and decode, head dims 40-256, masks, GQA, fp16/bf16/fp32: every call agrees."""
    calls = default_calls(gpu)
    assert len(calls) >= 10
    spec = gm.get_gpu(gpu)
    for r in calls:
        impl, _ = sdpa_dispatch(spec, r["dtype"], r["shape"]["head_dim"], bool(r.get("mask")))
        assert impl == r["backend_used"], (r["label"], r["dtype"], r["shape"])
    assert "cudnn" in {r["backend_used"] for r in calls}
    if gpu == "h200":  # fp32 calls too
        assert "efficient" in {r["backend_used"] for r in calls}


@pytest.mark.parametrize(("gpu", "kw", "impl"), [
    ("h100", {}, "cudnn"), ("h200", {"seq": 1, "kv_seq": 4096}, "cudnn"), ("b200", {}, "cudnn"),
    ("h100", {"head_dim": 100}, "flash"),  # cuDNN takes multiples of 8; flash pads
    ("h100", {"head_dim": 512}, "efficient"),  # above 256: neither flash nor cuDNN
    ("h100", {"dtype": "fp32"}, "efficient"),
    ("h100", {"mask": True}, "cudnn"),
    ("a100", {}, "flash"), ("l40s", {}, "flash"), ("mi300x", {}, "flash"),
    ("a100", {"mask": True}, "efficient"),  # flash takes no explicit mask
    ("a100", {"mask": True, "head_dim": 100}, "naive"),  # nor the efficient kernel that head dim
    ("v100", {"dtype": "fp16"}, "efficient"),  # before sm80
])  # fmt: skip
def test_dispatch_follows_sdpas_order(gpu, kw, impl):
    op = Attention(**{"seq": 1024, **kw})
    assert op.impl == ("efficient" if kw.get("dtype") == "fp32" else "sdpa")
    assert op.on(gm.get_gpu(gpu)).impl == impl


def test_the_default_prices_the_dispatched_kernel_and_says_so():
    default = gm.predict(Attention(batch=2, seq=2048), "h100")
    named = gm.predict(Attention(batch=2, seq=2048, impl="cudnn"), "h100")
    assert default.time_s == named.time_s
    assert "impl=cudnn" in default.op
    assert "SDPA's default dispatch runs impl=cudnn" in default.explain()
    # its accuracy is the kernel's own class: cuDNN's decode on an H200
    decode = gm.predict(Attention(batch=8, seq=1, kv_seq=2048), "h200")
    assert decode.accuracy is not None and "cuDNN" in decode.accuracy.what
    # the speed of light bounds the same kernel
    assert gm.speed_of_light(Attention(batch=2, seq=2048), "h100").op == named.op


def test_kernel_quantities_of_an_unresolved_default_name_the_fix():
    with pytest.raises(UnsupportedError, match=r"op\.on\(gpu\)"):
        _ = Attention(seq=1024, causal=True).computed_scores


def test_cli_table_title_shows_each_gpus_kernel(capsys):
    assert main(["predict", "attention", "--seq", "1024", "--gpu", "a100,h100"]) == 0
    out = capsys.readouterr().out
    assert "impl=flash (a100-sxm4-80gb) / cudnn (h100-sxm)" in " ".join(out.split())

