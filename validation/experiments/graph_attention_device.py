"""Decode attention on repeat_kv'd K/V inside a compiled CUDA graph, against the same kernels alone.

Experiment for the `hf-static-compiled` decode step (docs/llm.md): every compiled decode point
ran slower than priced (H200 -4 to -9%, H100 -2 to -7%, Qwen3-30B-A3B -11 to -17%), and the
committed traces put the gap on each layer's attention: Inductor's two ``repeat_kv`` copies
(Triton pointwise kernels) and cuDNN's decode kernel on the expanded K/V ran at 3.5-3.9 TB/s
where validate's isolated cuDNN decode points of the same size ran at 4.0-4.4. Not the unseen
set: its own shapes (none of the unseen grids'), timing no whole step; never scored against.

For each (batch, heads, kv heads, keys), eight layers of their own Q, K/V cache and mask:

- ``graph``: ``torch.compile(mode="reduce-overhead", dynamic=False)`` of HF's decode attention
  for the eight layers (``repeat_kv`` as HF writes it, then SDPA with the StaticCache's bool
  mask), replayed; per-kernel GPU durations from torch.profiler (CUPTI), the replay's time from
  CUDA events, NVML SM clock and power during the replays;
- ``attention after read`` / ``after write``: the same SDPA call eagerly on materialised
  expanded K/V, each call after a 512 MB flush that reads (a sum) or writes (a fill): a clean or
  a dirty L2;
- ``expand after read`` / ``after write``: Inductor's ``repeat_kv`` copy of one tensor
  compiled alone (no graph), after the same flushes.

usage: python3 graph_attention_device.py --out FILE.json [--tiny] [--from-shape I]
(run 1, 2026-11-30: the first four shapes; the other four hit Dynamo's recompile limit, now
reset per shape, and were measured in run 2 with --from-shape 4)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

LAYERS = 8
# (batch, heads, kv heads, keys): GQA 4 (Llama-3-8B, Mistral), GQA 8 (Qwen3-30B-A3B), and MHA
# (no repeat_kv); keys = a StaticCache of context + 64
SHAPES = [(4, 32, 8, 2112), (8, 32, 8, 1088), (16, 32, 8, 3136), (32, 32, 8, 1088),
          (8, 32, 4, 4160), (2, 32, 4, 8256), (8, 32, 32, 2112), (24, 32, 32, 1088)]  # fmt: skip
TINY_SHAPES = [(2, 4, 2, 64), (1, 4, 4, 64)]
HEAD_DIM = 128
FLUSH_BYTES = 512 << 20


class Sampler:
    """NVML SM clock (MHz) and power (W) every ~20 ms in a thread (pynvml, else nvidia-smi)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run_nvml(self, nv, h) -> None:
        while not self._stop.is_set():
            clk = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
            pw = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
            self.samples.append((time.perf_counter(), float(clk), pw))
            time.sleep(0.02)

    def _run_smi(self) -> None:
        cmd = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
               "-lms", "20", "-i", os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        while not self._stop.is_set():
            line = proc.stdout.readline() if proc.stdout else ""
            parts = [x.strip() for x in line.split(",")]
            if len(parts) == 2:
                try:
                    self.samples.append((time.perf_counter(), float(parts[0]), float(parts[1])))
                except ValueError:
                    pass
        proc.terminate()

    def __enter__(self) -> Sampler:
        try:
            import pynvml as nv

            nv.nvmlInit()
            h = nv.nvmlDeviceGetHandleByIndex(0)
            self._thread = threading.Thread(target=self._run_nvml, args=(nv, h), daemon=True)
        except Exception:  # no pynvml: nvidia-smi
            self._thread = threading.Thread(target=self._run_smi, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def summary(self) -> dict:
        if not self.samples:
            return {}
        clk = [s[1] for s in self.samples]
        pw = [s[2] for s in self.samples]
        return {"n": len(self.samples), "sm_mhz_median": statistics.median(clk),
                "sm_mhz_min": min(clk), "power_w_median": statistics.median(pw),
                "power_w_max": max(pw)}  # fmt: skip


def write_json(path: str, obj: dict) -> None:
    """``obj`` to ``path`` whole or not at all (gpumodel's atomic write): a run cut short keeps
    the last complete write."""
    from gpumodel._io import atomic_write_text

    atomic_write_text(path, json.dumps(obj, indent=1))


def repeat_kv(x, rep: int):
    """HF's repeat_kv: (b, kvh, L, d) -> (b, kvh * rep, L, d)."""
    if rep == 1:
        return x
    b, kvh, length, d = x.shape
    return x[:, :, None, :, :].expand(b, kvh, rep, length, d).reshape(b, kvh * rep, length, d)


def kernel_durations(prof_fn, torch) -> list[tuple[str, float]]:
    """(name, GPU µs) of every kernel that ``prof_fn()`` ran, in issue order (CUPTI)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        prof_fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    os.unlink(path)
    ks = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    return [(e["name"], float(e["dur"])) for e in ks]


def kind(name: str) -> str:
    n = name.lower()
    if "triton" in n:
        return "triton"
    if "sdpa" in n or "flash" in n or "fmha" in n or "attention" in n:
        return "attention"
    return "other"


def median_by_kind(ks: list[tuple[str, float]], big: float) -> dict:
    """Medians per kind; triton kernels split into big (the copies) and small ones."""
    out: dict[str, list[float]] = {}
    names: dict[str, str] = {}
    for name, d in ks:
        k = kind(name)
        if k == "triton":
            k = "expand" if d >= big else "triton_small"
        out.setdefault(k, []).append(d)
        names.setdefault(k, name[:160])
    return {k: {"median_us": statistics.median(v), "n": len(v), "sum_us": sum(v),
                "name": names[k]} for k, v in out.items()}  # fmt: skip


def measure_shape(torch, F, b: int, h: int, kvh: int, keys: int, reps: int) -> dict:
    dev, dt, d = "cuda", torch.bfloat16, HEAD_DIM
    rep = h // kvh
    qs = [torch.randn(b, h, 1, d, device=dev, dtype=dt) for _ in range(LAYERS)]
    ks = [torch.randn(b, kvh, keys, d, device=dev, dtype=dt) for _ in range(LAYERS)]
    vs = [torch.randn(b, kvh, keys, d, device=dev, dtype=dt) for _ in range(LAYERS)]
    # the StaticCache's bool mask: the first keys - 64 + 1 positions are filled
    mask = torch.zeros(b, 1, 1, keys, device=dev, dtype=torch.bool)
    mask[..., : keys - 63] = True
    for t in (*qs, *ks, *vs, mask):  # as StaticCache marks its tensors: no copy into the graph
        torch._dynamo.mark_static_address(t)

    def layers(qs, ks, vs, mask):
        outs = []
        for q, k, v in zip(qs, ks, vs):
            outs.append(F.scaled_dot_product_attention(q, repeat_kv(k, rep), repeat_kv(v, rep),
                                                       attn_mask=mask))  # fmt: skip
        return torch.cat(outs)

    torch._dynamo.reset()  # each shape its own compile (Dynamo's recompile limit is 8)
    compiled = torch.compile(layers, mode="reduce-overhead", dynamic=False, fullgraph=True)
    t0 = time.perf_counter()
    with torch.no_grad():
        for _ in range(3):
            compiled(qs, ks, vs, mask)
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    ref = layers(qs[:1], ks[:1], vs[:1], mask)
    got = compiled(qs, ks, vs, mask)[:b]
    err = float((got.float() - ref.float()).abs().max())

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.no_grad(), Sampler() as samp:
        for _ in range(5):
            compiled(qs, ks, vs, mask)
        start.record()
        for _ in range(reps):
            compiled(qs, ks, vs, mask)
        end.record()
        torch.cuda.synchronize()
    replay_us = start.elapsed_time(end) * 1e3 / reps

    def replays():
        for _ in range(5):
            compiled(qs, ks, vs, mask)

    with torch.no_grad():
        gks = kernel_durations(replays, torch)
    big = 8.0  # µs: the copies of these shapes run longer, the graph's small kernels shorter
    graph = median_by_kind(gks, big)

    # eager, alone: SDPA on materialised copies, after a flush that reads or writes
    kx = [repeat_kv(k, rep).contiguous() for k in ks[:2]]
    vx = [repeat_kv(v, rep).contiguous() for v in vs[:2]]
    flush = torch.empty(FLUSH_BYTES // 4, device=dev, dtype=torch.float32)
    expand_one = torch.compile(lambda x: repeat_kv(x, rep).contiguous(), dynamic=False)
    with torch.no_grad():
        expand_one(ks[0])

    def alone(after: str, what: str):
        def run():
            for i in range(reps):
                if after == "read":
                    flush.sum()
                else:
                    flush.fill_(float(i))
                if what == "attention":
                    F.scaled_dot_product_attention(qs[i % 2], kx[i % 2], vx[i % 2], attn_mask=mask)
                else:
                    expand_one(ks[i % 2])

        with torch.no_grad():
            ks_ = kernel_durations(run, torch)
        # the kernel after each flush: drop the flush's own kernels
        durs = [dd for name, dd in ks_ if (kind(name) == "attention") == (what == "attention")
                and ("triton" in name.lower()) == (what == "expand")
                and "reduce" not in name.lower() and "fill" not in name.lower()]  # fmt: skip
        return {"median_us": statistics.median(durs) if durs else None, "n": len(durs),
                "names": sorted({n[:120] for n, _ in ks_})[:8]}  # fmt: skip

    out = {
        "batch": b, "heads": h, "kv_heads": kvh, "keys": keys, "head_dim": d, "layers": LAYERS,
        "expanded_kv_bytes": 2 * b * h * keys * d * 2, "cache_kv_bytes": 2 * b * kvh * keys * d * 2,
        "compile_s": compile_s, "max_abs_err_vs_eager": err,
        "graph_replay_us": replay_us, "graph_replay_us_per_layer": replay_us / LAYERS,
        "graph_kernels": graph, "graph_kernel_count_per_replay": len(gks) / 5, "nvml_graph": samp.summary(),
        "attention_after_read": alone("read", "attention"),
        "attention_after_write": alone("write", "attention"),
    }  # fmt: skip
    if rep > 1:
        out["expand_after_read"] = alone("read", "expand")
        out["expand_after_write"] = alone("write", "expand")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--from-shape", type=int, default=0, help="skip the first I shapes")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    t_start = time.perf_counter()
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
              "cudnn": torch.backends.cudnn.version(), "shapes": [], "skipped": []}  # fmt: skip
    for b, h, kvh, keys in (TINY_SHAPES if args.tiny else SHAPES)[args.from_shape :]:
        if time.perf_counter() - t_start > args.budget_s:
            result["skipped"].append([b, h, kvh, keys])
            continue
        try:
            r = measure_shape(torch, F, b, h, kvh, keys, 20 if not args.tiny else 3)
        except Exception as e:  # record and go on
            r = {"batch": b, "heads": h, "kv_heads": kvh, "keys": keys, "error": repr(e)[:400]}
        result["shapes"].append(r)
        torch.cuda.empty_cache()
        print(json.dumps({k: r.get(k) for k in ("batch", "kv_heads", "keys", "graph_replay_us_per_layer",
                                                "error")}), flush=True)  # fmt: skip
        write_json(args.out, result)
    result["elapsed_s"] = time.perf_counter() - t_start
    write_json(args.out, result)


if __name__ == "__main__":
    sys.exit(main())
