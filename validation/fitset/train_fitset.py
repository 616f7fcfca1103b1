#!/usr/bin/env python3
"""Training-step FIT set (issue #17 item 3): HF training steps the training model may be fitted to.

This set shares no point with the unseen set (validation/unseen/steps_unseen.py: GPT-2 small
and a TinyLlama-1.1B-shaped Llama): it uses other models. It imports nothing from gpumodel.

Models (random weights, built from configs; no network on the device):
- gpt2-medium: openai-community/gpt2-medium's config (n_embd 1024, 24 layers, 16 heads, vocab
  50257, 1024 positions; HF's default dropout 0.1 and gelu_new, as a user gets it);
- llama-350m: LlamaConfig(hidden 1024, 24 layers, 16 heads, 8 kv heads, ffn 2816, vocab 32000);
- llama-600m: LlamaConfig(hidden 1536, 20 layers, 12 heads of 128, 4 kv heads, ffn 4096,
  vocab 32000).
Each in the policies `amp` (fp32 weights + torch.autocast(bf16)) and `bf16` (model.to(bf16)),
torch.optim.AdamW(fused=True), loss through HF's labels=, zero_grad(set_to_none=True), sdpa.

Every point: fresh setup (empty_cache, reset_peak_memory_stats), 2 warm-up steps, 5 timed steps
(CUDA events around each step), in rounds that cycle over the points of one (model, policy) so
that drift spreads over all of them; records hold the pooled median/p10/p90, per-round medians,
loop wall time per step, torch.cuda.max_memory_allocated/reserved, the memory allocated before
the model was built (a leak check) and after the first step (weights + grads + optimizer
states). One torch.profiler trace per (model, policy) (CPU + CUDA, record_shapes,
profile_memory, wait 1 / warmup 1 / active 3, record_function("step")), gzipped.

Usage (device):  python validation/fitset/train_fitset.py --out DIR [--budget-s 330]
Smoke test (CPU): python validation/fitset/train_fitset.py --tiny --out /tmp/fit
Outputs: DIR/train-fitset.json, DIR/summary.md, DIR/traces-<model>.tar (its gz traces; the
narrow models' in traces-narrow.tar).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import gc
import gzip
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

SCHEMA = "gpumodel-train-fitset/1"
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", flush=True)


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


# --------------------------------------------------------------------------- configs


def gpt2_medium_config(tiny: bool):
    from transformers import GPT2Config

    if tiny:
        return GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=1024,
                          attn_implementation="sdpa")  # fmt: skip
    # openai-community/gpt2-medium config.json: n_embd 1024, 24 layers, 16 heads, vocab 50257
    return GPT2Config(n_embd=1024, n_layer=24, n_head=16, vocab_size=50257, n_positions=1024,
                      attn_implementation="sdpa")  # fmt: skip


def llama_config(tiny: bool, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int):
    from transformers import LlamaConfig

    if tiny:
        return LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=500,
                           max_position_embeddings=2048, attn_implementation="sdpa")  # fmt: skip
    return LlamaConfig(hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=32000,
                       max_position_embeddings=2048, rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                       tie_word_embeddings=False, attn_implementation="sdpa")  # fmt: skip


# (name, config, [(batch, seq)], traced (batch, seq)); tiny: CPU smoke test shapes
def plans(tiny: bool) -> list[tuple]:
    if tiny:
        g = [(1, 32), (2, 32)]
        return [("gpt2-medium", gpt2_medium_config(True), g, (2, 32)),
                ("llama-350m", llama_config(True, 0, 0, 0, 0, 0), g, (2, 32))]  # fmt: skip
    return [
        ("gpt2-medium", gpt2_medium_config(False), [(1, 512), (4, 1024), (8, 1024), (16, 512)],
         (4, 1024)),
        ("llama-350m", llama_config(False, 1024, 24, 16, 8, 2816),
         [(1, 1024), (4, 1024), (2, 2048), (6, 2048)], (2, 2048)),
        ("llama-600m", llama_config(False, 1536, 20, 12, 4, 4096),
         [(1, 2048), (2, 1024), (4, 2048), (8, 2048)], (4, 2048)),
        # the same layer counts at width 64: steps so small that the host sets their time (the
        # host cost of an eager training step per layer, with the GPU nearly idle)
        ("gpt2-24l-narrow", narrow(gpt2_medium_config(True), 24), [(1, 64), (4, 64)], (1, 64)),
        ("llama-24l-narrow", narrow(llama_config(True, 0, 0, 0, 0, 0), 24), [(1, 64), (4, 64)],
         (1, 64)),
    ]  # fmt: skip


def narrow(cfg, layers: int):
    """``cfg`` (a tiny-width config) with ``layers`` layers."""
    if hasattr(cfg, "n_layer"):
        cfg.n_layer = layers
    cfg.num_hidden_layers = layers
    return cfg


# --------------------------------------------------------------------------- harness


class Env:
    def __init__(self, tiny: bool):
        import torch

        self.torch = torch
        self.cuda = torch.cuda.is_available() and not tiny
        self.device = "cuda" if self.cuda else "cpu"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def fresh_memory(self) -> None:
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()

    def allocated(self) -> int | None:
        return int(self.torch.cuda.memory_allocated()) if self.cuda else None

    def peaks(self) -> tuple[int | None, int | None]:
        if not self.cuda:
            return None, None
        tc = self.torch.cuda
        return int(tc.max_memory_allocated()), int(tc.max_memory_reserved())

    def time_steps(self, step, n_warm: int, n_steps: int) -> tuple[list[float], float]:
        """Per-step seconds (CUDA events around each step) and loop wall seconds per step."""
        for _ in range(n_warm):
            step()
        self.sync()
        torch = self.torch
        if self.cuda:
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(n_steps)]  # fmt: skip
            t0 = time.perf_counter()
            for s, e in ev:
                s.record()
                step()
                e.record()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / n_steps
            return [s.elapsed_time(e) / 1e3 for s, e in ev], wall
        times = []
        t0 = time.perf_counter()
        for _ in range(n_steps):
            a = time.perf_counter()
            step()
            times.append(time.perf_counter() - a)
        return times, (time.perf_counter() - t0) / n_steps


class Point:
    """One measured configuration: ``setup()`` -> state (per round), ``step(state)``."""

    def __init__(self, key: dict, setup, step, details: dict):
        self.key = key
        self.setup = setup
        self.step = step
        self.details = dict(details)
        self.status = "ok"
        self.error: str | None = None
        self.rounds: list[list[float]] = []
        self.walls: list[float] = []
        self.starts: list[float] = []
        self.peak_alloc: list[int] = []
        self.peak_res: list[int] = []
        self.traced = False

    def label(self) -> str:
        k = self.key
        return f"{k['workload']} {k['policy']} b{k['batch']} s{k['seq']}"

    def record(self) -> dict:
        rec = dict(self.key)
        rec["status"] = self.status
        rec["error"] = self.error
        rec["tokens_per_step"] = self.key["batch"] * self.key["seq"]
        pooled = [t for r in self.rounds for t in r]
        if pooled:
            rec["step_s"] = {"median": statistics.median(pooled), "p10": quantile(pooled, 0.1),
                             "p90": quantile(pooled, 0.9), "mean": statistics.fmean(pooled),
                             "min": min(pooled), "max": max(pooled), "n": len(pooled)}  # fmt: skip
            rec["round_medians_s"] = [statistics.median(r) for r in self.rounds]
            rec["wall_per_step_s"] = statistics.median(self.walls)
            rec["round_wall_per_step_s"] = self.walls
            rec["round_started_s"] = [round(s, 2) for s in self.starts]
            rec["steps_s"] = self.rounds
        else:
            rec["step_s"] = None
        rec["peak_allocated_bytes"] = max(self.peak_alloc) if self.peak_alloc else None
        rec["peak_reserved_bytes"] = max(self.peak_res) if self.peak_res else None
        rec["traced"] = self.traced
        rec["details"] = self.details
        return rec


def is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def run_round_robin(env: Env, points: list[Point], rounds: int, warm: int, steps: int,
                    deadline: float) -> None:  # fmt: skip
    """Up to ``rounds`` rounds (at least 2); each runs every live point once (setup, warm-up,
    timed steps)."""
    for r in range(rounds):
        if time.perf_counter() > deadline and r >= 2:
            log(f"time budget reached after {r} rounds")
            break
        for p in points:
            if p.status != "ok":
                continue
            state = None
            try:
                env.fresh_memory()
                state = p.setup()
                start = time.perf_counter() - T0
                times, wall = env.time_steps(functools.partial(p.step, state), warm, steps)
                pa, pr = env.peaks()
                p.rounds.append(times)
                p.walls.append(wall)
                p.starts.append(start)
                if pa is not None:
                    p.peak_alloc.append(pa)
                    p.peak_res.append(pr)
                log(f"round {r + 1} {p.label()}: median {statistics.median(times) * 1e3:.2f} ms"
                    f" (wall {wall * 1e3:.2f} ms) peak {(pa or 0) / 1e9:.2f} GB")  # fmt: skip
            except Exception as exc:
                p.status = "oom" if is_oom(exc) else "error"
                p.error = f"{type(exc).__name__}: {exc}"[:500]
                log(f"{p.label()}: {p.status}: {p.error[:200]}")
                if p.status == "error":
                    traceback.print_exc()
            finally:
                state = None
                env.fresh_memory()


def trace_point(env: Env, p: Point, work: Path, name: str) -> dict:
    """One torch.profiler trace of ``p`` (wait 1, warmup 1, active 3), chrome json, gzipped."""
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if env.cuda else [])
    raw = work / f"{name}.json"
    info: dict = {"name": name, "point": p.key, "file": f"{name}.json.gz", "wait": 1,
                  "warmup": 1, "active": 3, "record_shapes": True, "profile_memory": True,
                  "with_stack": False}  # fmt: skip
    state = None
    try:
        env.fresh_memory()
        state = p.setup()
        p.step(state)  # one untraced warm-up after the fresh setup
        env.sync()
        step_times = []

        def ready(prof) -> None:
            prof.export_chrome_trace(str(raw))

        with profile(activities=acts, record_shapes=True, profile_memory=True,
                     schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                     on_trace_ready=ready) as prof:  # fmt: skip
            for _ in range(5):
                a = time.perf_counter()
                with record_function("step"):
                    p.step(state)
                env.sync()
                step_times.append(time.perf_counter() - a)
                prof.step()
        info["profiled_step_wall_s"] = step_times
        with open(raw, "rb") as src, gzip.open(str(raw) + ".gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        info["raw_bytes"] = raw.stat().st_size
        info["gz_bytes"] = Path(str(raw) + ".gz").stat().st_size
        p.traced = True
        log(
            f"trace {name}: {info['raw_bytes'] / 1e6:.1f} MB raw, {info['gz_bytes'] / 1e6:.1f} MB gz"
        )
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"[:500]
        log(f"trace {name} failed: {info['error'][:200]}")
        traceback.print_exc()
    finally:
        state = None
        env.fresh_memory()
        if raw.exists():
            raw.unlink()
    return info


def build_causal_lm(env: Env, cfg, dtype):
    """A model with random weights, built directly on the device in ``dtype``."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(env.device):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    finally:
        torch.set_default_dtype(old)
    return model


def train_points(env: Env, name: str, model, cfg, opt, policy: str, grid) -> list[Point]:
    import torch

    pts = []
    for b, seq in grid:

        def setup(b=b, seq=seq):
            return {"ids": torch.randint(0, cfg.vocab_size, (b, seq), device=env.device)}

        def step(s):
            if policy == "amp":
                with torch.autocast(env.device, dtype=torch.bfloat16):
                    loss = model(input_ids=s["ids"], labels=s["ids"]).loss
            else:
                loss = model(input_ids=s["ids"], labels=s["ids"]).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        pts.append(Point({"workload": name, "runtime": "hf-eager", "phase": "train",
                          "policy": policy, "batch": b, "seq": seq, "context": 0}, setup, step,
                         details={"optimizer": "torch.optim.AdamW(lr=1e-4, fused=True), "
                         "zero_grad(set_to_none=True)", "loss": "HF labels= (ForCausalLMLoss)",
                         "weights": "fp32, bf16 autocast" if policy == "amp" else
                         "bf16 (model.to(bfloat16)), bf16 grads and AdamW states",
                         "attn_implementation": "sdpa", "mode": "model.train()"}))  # fmt: skip
    return pts


# --------------------------------------------------------------------------- env


def sh(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return None


def env_info(env: Env) -> dict:
    import torch

    try:
        import transformers

        tv = transformers.__version__
    except Exception:
        tv = None
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "hostname": socket.gethostname(), "cpu_model": cpu, "cpu_cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": tv, "cuda_runtime": getattr(torch.version, "cuda", None),
            "cudnn": torch.backends.cudnn.version() if env.cuda else None,
            "device": env.device, "os_kernel": platform.release()}  # fmt: skip
    if env.cuda:
        prop = torch.cuda.get_device_properties(0)
        info.update({"gpu": prop.name, "gpu_memory_bytes": int(prop.total_memory),
                     "sm_count": prop.multi_processor_count,
                     "nvidia_smi": sh(["nvidia-smi", "--query-gpu=name,driver_version,"
                                       "clocks.max.sm,clocks.max.mem,power.limit,pstate",
                                       "--format=csv"])})  # fmt: skip
    return info


def summary_table(records: list[dict]) -> str:
    head = ("| model | policy | batch | seq | median ms | p10 ms | p90 ms | round medians ms | "
            "wall ms | peak alloc GB | peak reserved GB | states GB | status |\n"
            "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|\n")  # fmt: skip
    rows = []
    for r in records:
        st = r.get("step_s")
        if st:
            ms = (f"{st['median'] * 1e3:.2f} | {st['p10'] * 1e3:.2f} | {st['p90'] * 1e3:.2f} | "
                  + ", ".join(f"{x * 1e3:.1f}" for x in r["round_medians_s"])
                  + f" | {r['wall_per_step_s'] * 1e3:.2f}")  # fmt: skip
        else:
            ms = "- | - | - | - | -"
        pa, pr = r.get("peak_allocated_bytes"), r.get("peak_reserved_bytes")
        states = r["details"].get("allocated_after_first_step_bytes")
        rows.append(f"| {r['workload']} | {r['policy']} | {r['batch']} | {r['seq']} | {ms} | "
                    f"{(pa or 0) / 1e9:.2f} | {(pr or 0) / 1e9:.2f} | {(states or 0) / 1e9:.2f} | "
                    f"{r['status']}{' (traced)' if r.get('traced') else ''} |")  # fmt: skip
    return head + "\n".join(rows) + "\n"


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true", help="tiny configs on the CPU (smoke test)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=330.0)
    ap.add_argument("--only", default=None, help="comma-separated model names")
    args = ap.parse_args()
    if args.rounds < 2 or args.steps < 3:
        print("error: need --rounds >= 2 and --steps >= 3", file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="train_fitset_"))  # raw traces: outside ``out``

    import signal

    import torch

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))  # a timeout still writes the data
    env = Env(args.tiny)
    log(f"torch {torch.__version__} device {env.device}")
    result: dict = {"schema": SCHEMA, "tiny": args.tiny, "env": env_info(env),
                    "method": {"rounds": args.rounds, "timed_steps_per_round": args.steps,
                               "warmup_steps": 2, "timer": "CUDA events around each step "
                               "(perf_counter on CPU); wall_per_step_s: perf_counter over the "
                               "timed loop with a sync at its end / steps", "interleaving":
                               "each round runs every point of one (model, policy) once: fresh "
                               "setup (empty_cache, reset_peak_memory_stats), warm-up, timed "
                               "steps"}, "models": {}, "records": [], "traces": [],
                    "command": " ".join(sys.argv)}  # fmt: skip
    todo = [p for p in plans(args.tiny) if not args.only or p[0] in args.only.split(",")]
    runs = [(p, pol) for p in todo for pol in ("amp", "bf16")]
    try:
        for i, ((name, cfg, grid, traced_at), policy) in enumerate(runs):
            env.fresh_memory()
            before = env.allocated()
            t0 = time.perf_counter()
            dtype = torch.float32 if policy == "amp" else torch.bfloat16
            model = build_causal_lm(env, cfg, dtype).train()
            n_params = sum(p.numel() for p in model.parameters())
            result["models"].setdefault(name, {"params": n_params, "config": cfg.to_dict()})
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=env.cuda,
                                    foreach=None if env.cuda else False)  # fmt: skip
            log(f"{name} {policy}: {n_params / 1e6:.1f} M params built in "
                f"{time.perf_counter() - t0:.1f} s (allocated before: {(before or 0) / 1e9:.2f} GB)")  # fmt: skip
            pts = train_points(env, name, model, cfg, opt, policy, grid)
            # weights + grads + AdamW states after one step (grads set to None: weights + states)
            env.fresh_memory()
            first = pts[0]
            first.step(first.setup())
            env.sync()
            env.fresh_memory()
            after = env.allocated()
            for p in pts:
                p.details["allocated_before_build_bytes"] = before
                p.details["allocated_after_first_step_bytes"] = after
                p.details["params"] = n_params
            remaining = T0 + args.budget_s - time.perf_counter()
            share = remaining / (len(runs) - i)
            run_round_robin(env, pts, args.rounds, 2, args.steps,
                            time.perf_counter() + 0.75 * share)  # fmt: skip
            traced = next((p for p in pts if (p.key["batch"], p.key["seq"]) == traced_at), None)
            if traced is not None and traced.status == "ok":
                tname = f"trace-{name}-train-{policy}"
                result["traces"].append(trace_point(env, traced, work, tname))
            result["records"] += [p.record() for p in pts]
            # `p` (the loop variable above) would keep the last Point, its step closure and
            # so this run's model and AdamW states alive into the next run (the 2026-11-24 data
            # have that: allocated_before_build_bytes says how much)
            del model, opt, pts, traced, first, p
            env.fresh_memory()
    finally:
        result["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        result["seconds"] = round(time.perf_counter() - T0, 1)
        atomic_write(out_dir / "train-fitset.json", json.dumps(result, indent=1, default=str))
        table = summary_table(result["records"])
        atomic_write(out_dir / "summary.md", table)
        groups: dict[str, list[Path]] = {}  # <= 8 files come back from the device
        for f in sorted(work.glob("trace-*.json.gz")):
            key = (
                "narrow"
                if "-narrow-" in f.name
                else f.name.removeprefix("trace-").split("-train-")[0]
            )
            groups.setdefault(key, []).append(f)
        for key, files in groups.items():
            with tarfile.open(out_dir / f"traces-{key}.tar", "w") as tar:
                for f in files:
                    tar.add(f, arcname=f.name)
        shutil.rmtree(work, ignore_errors=True)
        print(table, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
