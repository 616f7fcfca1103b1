#!/usr/bin/env python3
"""Unseen whole-step workloads (issues #17 item 5, #18 item 5): measured, never fitted to.

Full-size models with random weights, built by hand from their published configs (no network
on the device), timed as a user runs them with HF transformers:

- Llama-3-8B decode (`hf-eager`: DynamicCache, sdpa) at batch 1/8/32/64 x context 512/2048/4096,
  eager prefill at batch 1 x 128/512/1024/2048, batch 4 x 512/2048, batch 8 x 2048;
- Llama-3-8B `hf-static-compiled` decode (StaticCache + torch.compile(mode="reduce-overhead"),
  as HF documents for fast generation) at batch 1/16 x context 2048/4096, and one prefill point
  into a StaticCache (HF runs prefill uncompiled); with --static-grid wide (a device call of its
  own) also batch 8 x 1024 and 32 x 2048, and prefill at batch 1 x 128/512/2048 and 4 x 512;
- Llama-3-8B `fused-graph` decode (`--part fused`) on a vLLM-style engine written for the
  purpose (`fused_engine.py`: no vLLM on the device), on the eager decode's grid;
- training steps (fwd + bwd + fused AdamW step + zero_grad, loss through labels=) of GPT-2 small
  (batch 4/8/16/24, seq 1024) and a TinyLlama-1.1B-shaped Llama (batch 1/2/4/8, seq 2048), each
  in the policies `amp` (fp32 weights + bf16 autocast) and `bf16` (model.to(bfloat16)).

Every point: warm-up steps, then timed steps (CUDA events around each step), in rounds that
cycle over the points of one model so that drift of the machine spreads over all of them. A
record holds the pooled median, p10, p90, the per-round medians and the loop wall time per step.
Peak memory (max_memory_allocated / max_memory_reserved after empty_cache + reset) per point.

Traces (#18 item 5): one torch.profiler trace (CPU + CUDA, record_shapes, profile_memory for
training, schedule wait 1 / warmup 1 / active 3, record_function("step")) of Llama-3-8B eager
decode at batch 8 x 2048, eager prefill at batch 4 x 512, GPT-2 amp at batch 8 and the 1.1B amp
at batch 2; the traced point's unprofiled step time and 5+ other points come from the same
process.

The host profile of the machine (what `gpumodel validate --host-only` writes) is measured at the
start of every part, so a workload and the host it ran on are measured in the same device call.
On CUDA it runs in a child process, as a user runs it: torch.profiler leaves CUPTI attached to
the process when it stops (unless TEARDOWN_CUPTI=1), and every eager step after it paid 16-27%
more host time (validation/results/h200-sxm/process-state-2026-11-25). For the same reason the
Llama part records its traces after all its timed points, and run_device.sh exports
TEARDOWN_CUPTI=1 for the training part's traces between models. Runs before 2026-11-25 02:40
UTC measured the host in process and their steps after it.

Usage (device):  python validation/unseen/steps_unseen.py --part decode,prefill --out DIR
                 parts: decode, prefill, static, train, fused, arch, padded, families,
                 family-train, moe, moe-train (host first
                 unless --no-host)
Smoke test (CPU): python validation/unseen/steps_unseen.py --tiny --part decode,prefill,static,train --out /tmp/x
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
import sys
import time
import traceback
from pathlib import Path

SCHEMA = "gpumodel-steps-unseen/1"
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


def _llama(tiny: bool, full: dict, small: dict, context: int):
    """A LlamaConfig: the published one (``full``: hidden, ffn, layers, heads, kv heads, vocab,
    rope theta), or a tiny one for the CPU smoke test (``small``: its ffn, kv heads, vocab)."""
    from transformers import LlamaConfig

    if tiny:
        return LlamaConfig(hidden_size=64, intermediate_size=small["ffn"], num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=small["kv"],
                           vocab_size=small["vocab"], max_position_embeddings=context,
                           attn_implementation="sdpa")  # fmt: skip
    return LlamaConfig(hidden_size=full["hidden"], intermediate_size=full["ffn"],
                       num_hidden_layers=full["layers"], num_attention_heads=full["heads"],
                       num_key_value_heads=full["kv"], vocab_size=full["vocab"],
                       max_position_embeddings=context, rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "default", "rope_theta": full["theta"]},
                       tie_word_embeddings=False, attn_implementation="sdpa")  # fmt: skip


def llama3_8b_config(tiny: bool):
    # Meta Llama-3-8B config.json: hidden 4096, 32 layers, 32 heads, 8 kv heads, ffn 14336,
    # vocab 128256, rope theta 500000, rms eps 1e-5, untied embeddings.
    return _llama(tiny, dict(hidden=4096, ffn=14336, layers=32, heads=32, kv=8, vocab=128256,
                             theta=500000.0), dict(ffn=160, kv=2, vocab=512), 8192)  # fmt: skip


def tinyllama_config(tiny: bool):
    # TinyLlama-1.1B config.json: hidden 2048, 22 layers, 32 heads, 4 kv heads, ffn 5632,
    # vocab 32000, rope theta 10000, rms eps 1e-5, untied embeddings.
    return _llama(tiny, dict(hidden=2048, ffn=5632, layers=22, heads=32, kv=4, vocab=32000,
                             theta=10000.0), dict(ffn=176, kv=2, vocab=500), 2048)  # fmt: skip


def gpt2_config(tiny: bool):
    from transformers import GPT2Config

    if tiny:
        return GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=1024,
                          attn_implementation="sdpa")  # fmt: skip
    # openai-community/gpt2 config.json: n_embd 768, 12 layers, 12 heads, vocab 50257, ctx 1024.
    return GPT2Config(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024,
                      attn_implementation="sdpa")  # fmt: skip


def llama2_7b_config(tiny: bool):
    # meta-llama/Llama-2-7b-hf config.json: hidden 4096, 32 layers, 32 heads and 32 kv heads
    # (no GQA), ffn 11008, vocab 32000, rope theta 10000, rms eps 1e-5, untied embeddings.
    return _llama(tiny, dict(hidden=4096, ffn=11008, layers=32, heads=32, kv=32, vocab=32000,
                             theta=10000.0), dict(ffn=172, kv=4, vocab=320), 4096)  # fmt: skip


def mistral_7b_config(tiny: bool):
    from transformers import MistralConfig

    if tiny:
        return MistralConfig(hidden_size=64, intermediate_size=224, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=1, vocab_size=320,
                             max_position_embeddings=4096, sliding_window=32,
                             attn_implementation="sdpa")  # fmt: skip
    # mistralai/Mistral-7B-v0.1 config.json: hidden 4096, 32 layers, 32 heads, 8 kv heads,
    # ffn 14336, vocab 32000, rope theta 10000, rms eps 1e-5, sliding window 4096.
    return MistralConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                         max_position_embeddings=32768, rms_norm_eps=1e-5, sliding_window=4096,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                         tie_word_embeddings=False, attn_implementation="sdpa")  # fmt: skip


def qwen2_5_7b_config(tiny: bool):
    from transformers import Qwen2Config

    if tiny:
        return Qwen2Config(hidden_size=64, intermediate_size=224, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=1, vocab_size=320,
                           max_position_embeddings=4096, attn_implementation="sdpa")  # fmt: skip
    # Qwen/Qwen2.5-7B config.json: hidden 3584, 28 layers, 28 heads, 4 kv heads, ffn 18944,
    # vocab 152064, rope theta 1e6, rms eps 1e-6, untied, biases on q/k/v, no sliding window
    # (use_sliding_window false): 7.62 B parameters.
    return Qwen2Config(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                       max_position_embeddings=32768, rms_norm_eps=1e-6, use_sliding_window=False,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                       tie_word_embeddings=False, attn_implementation="sdpa")  # fmt: skip


def qwen3_8b_config(tiny: bool):
    from transformers import Qwen3Config

    if tiny:
        return Qwen3Config(hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           vocab_size=320, max_position_embeddings=4096,
                           attn_implementation="sdpa")  # fmt: skip
    # Qwen/Qwen3-8B config.json: hidden 4096, 36 layers, 32 heads, 8 kv heads, head_dim 128,
    # ffn 12288, vocab 151936, rope theta 1e6, rms eps 1e-6, untied, RMSNorm on q and k per
    # head (q_norm, k_norm): 8.19 B parameters.
    return Qwen3Config(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                       vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                       tie_word_embeddings=False, attention_bias=False,
                       attn_implementation="sdpa")  # fmt: skip


def qwen3_0_6b_config(tiny: bool):
    if tiny:
        return qwen3_8b_config(True)
    from transformers import Qwen3Config

    # Qwen/Qwen3-0.6B config.json: hidden 1024, 28 layers, 16 heads, 8 kv heads, head_dim 128,
    # ffn 3072, vocab 151936, rope theta 1e6, rms eps 1e-6, tied embeddings: 0.60 B parameters.
    return Qwen3Config(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                       tie_word_embeddings=True, attention_bias=False,
                       attn_implementation="sdpa")  # fmt: skip


def phi3_mini_config(tiny: bool):
    from transformers import Phi3Config

    if tiny:
        return Phi3Config(hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=4, vocab_size=320,
                          max_position_embeddings=4096, sliding_window=31, pad_token_id=0,
                          attn_implementation="sdpa")  # fmt: skip
    # microsoft/Phi-3-mini-4k-instruct config.json: hidden 3072, 32 layers, 32 heads and 32 kv
    # heads (head_dim 96), ffn 8192, vocab 32064, rope theta 10000, rms eps 1e-5, untied,
    # sliding window 2047, one fused qkv_proj and one gate_up_proj per layer: 3.82 B parameters.
    return Phi3Config(hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, vocab_size=32064,
                      max_position_embeddings=4096, rms_norm_eps=1e-5, sliding_window=2047,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      tie_word_embeddings=False, pad_token_id=32000,
                      attn_implementation="sdpa")  # fmt: skip


def mixtral_8x7b_config(tiny: bool):
    from transformers import MixtralConfig

    if tiny:
        return MixtralConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, vocab_size=320,
                             num_local_experts=4, num_experts_per_tok=2,
                             max_position_embeddings=4096, attn_implementation="sdpa")  # fmt: skip
    # mistralai/Mixtral-8x7B-v0.1 config.json: hidden 4096, 32 layers, 32 heads, 8 kv heads,
    # expert ffn 14336, 8 experts, top-2, vocab 32000, rope theta 1e6, rms eps 1e-5, untied, no
    # sliding window: 46.70 B parameters.
    return MixtralConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                         num_local_experts=8, num_experts_per_tok=2, router_jitter_noise=0.0,
                         max_position_embeddings=32768, rms_norm_eps=1e-5, sliding_window=None,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                         tie_word_embeddings=False, attn_implementation="sdpa")  # fmt: skip


def qwen3_30b_a3b_config(tiny: bool):
    from transformers import Qwen3MoeConfig

    if tiny:
        return Qwen3MoeConfig(hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=16, num_experts=8, num_experts_per_tok=2, vocab_size=320,
                              max_position_embeddings=4096, attn_implementation="sdpa")  # fmt: skip
    # Qwen/Qwen3-30B-A3B config.json: hidden 2048, 48 layers, 32 heads, 4 kv heads, head_dim
    # 128, 128 experts of ffn 768, top-8 (norm_topk_prob), every layer sparse, vocab 151936,
    # rope theta 1e6, rms eps 1e-6, untied, q/k RMSNorm per head: 30.53 B parameters.
    return Qwen3MoeConfig(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                          num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4,
                          head_dim=128, num_experts=128, num_experts_per_tok=8,
                          norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                          vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
                          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                          tie_word_embeddings=False, attention_bias=False,
                          attn_implementation="sdpa")  # fmt: skip


def qwen3_moe_small_config(tiny: bool):
    """A small Qwen3-MoE a user trains from scratch on one GPU (no public checkpoint): 1.87 B
    parameters, 64 experts of FFN 512, top-8, tied embeddings."""
    from transformers import Qwen3MoeConfig

    if tiny:
        return Qwen3MoeConfig(hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=16, num_experts=8, num_experts_per_tok=2, vocab_size=320,
                              max_position_embeddings=4096, tie_word_embeddings=True,
                              attn_implementation="sdpa")  # fmt: skip
    return Qwen3MoeConfig(hidden_size=1024, intermediate_size=3072, moe_intermediate_size=512,
                          num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=8,
                          head_dim=128, num_experts=64, num_experts_per_tok=8,
                          norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                          vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
                          tie_word_embeddings=True, attention_bias=False,
                          attn_implementation="sdpa")  # fmt: skip


def mixtral_small_config(tiny: bool):
    """A small Mixtral-layout model a user trains from scratch on one GPU: 3.60 B parameters,
    8 experts of FFN 5632, top-2, untied."""
    from transformers import MixtralConfig

    if tiny:
        return mixtral_8x7b_config(True)
    return MixtralConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=12,
                         num_attention_heads=16, num_key_value_heads=8, vocab_size=32000,
                         num_local_experts=8, num_experts_per_tok=2, router_jitter_noise=0.0,
                         max_position_embeddings=32768, rms_norm_eps=1e-5, sliding_window=None,
                         tie_word_embeddings=False, attn_implementation="sdpa")  # fmt: skip


# --------------------------------------------------------------------------- harness


class Env:
    def __init__(self, tiny: bool):
        import torch

        self.torch = torch
        self.tiny = tiny
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

    def __init__(self, key: dict, setup, step, teardown=None, tokens: int | None = None,
                 details: dict | None = None):  # fmt: skip
        self.key = key
        self.setup = setup
        self.step = step
        self.teardown = teardown
        self.tokens = tokens
        self.details = dict(details or {})
        self.status = "ok"
        self.error: str | None = None
        self.rounds: list[list[float]] = []
        self.walls: list[float] = []
        self.starts: list[float] = []
        self.peak_alloc: list[int] = []
        self.peak_res: list[int] = []
        self.traced = False

    def add_round(self, times: list[float], wall: float, start: float,
                  peaks: tuple[int | None, int | None]) -> None:  # fmt: skip
        """One round's step times, loop wall time per step, start (s) and (allocated,
        reserved) peaks."""
        self.rounds.append(times)
        self.walls.append(wall)
        self.starts.append(start)
        if peaks[0] is not None:
            self.peak_alloc.append(peaks[0])
            self.peak_res.append(peaks[1])

    def label(self) -> str:
        k = self.key
        return f"{k['workload']} {k['runtime']} {k['phase']} {k.get('policy') or ''} b{k['batch']} s{k['seq']}"

    def record(self) -> dict:
        rec = dict(self.key)
        rec["status"] = self.status
        rec["error"] = self.error
        rec["tokens_per_step"] = self.tokens
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
    """``rounds`` rounds; each round runs every live point once (setup, warm-up, timed steps)."""
    for r in range(rounds):
        if time.perf_counter() > deadline and r >= 3:
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
                p.add_round(times, wall, start, env.peaks())
                log(f"round {r + 1} {p.label()}: median {statistics.median(times) * 1e3:.2f} ms"
                    f" (wall {wall * 1e3:.2f} ms)")  # fmt: skip
            except Exception as exc:
                p.status = "oom" if is_oom(exc) else "error"
                p.error = f"{type(exc).__name__}: {exc}"[:500]
                log(f"{p.label()}: {p.status}: {p.error[:200]}")
                if p.status == "error":
                    traceback.print_exc()
            finally:
                if p.teardown is not None and state is not None:
                    p.teardown(state)
                state = None
                env.fresh_memory()


def trace_point(env: Env, p: Point, out_dir: Path, name: str, memory: bool) -> dict:
    """One torch.profiler trace of ``p`` (wait 1, warmup 1, active 3), chrome json, gzipped."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if env.cuda else [])
    raw = out_dir / f"{name}.json"
    info: dict = {"name": name, "point": p.key, "file": f"{name}.json.gz", "wait": 1,
                  "warmup": 1, "active": 3, "record_shapes": True, "profile_memory": memory,
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

        with profile(activities=acts, record_shapes=True, profile_memory=memory,
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
        raw.unlink()
        p.traced = True
        log(
            f"trace {name}: {info['raw_bytes'] / 1e6:.1f} MB raw, {info['gz_bytes'] / 1e6:.1f} MB gz"
        )
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"[:500]
        log(f"trace {name} failed: {info['error'][:200]}")
        traceback.print_exc()
    finally:
        if p.teardown is not None and state is not None:
            p.teardown(state)
        del state
        env.fresh_memory()
        if raw.exists():
            raw.unlink()
    _ = torch
    return info


# --------------------------------------------------------------------------- models


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


def dims(cfg) -> tuple[int, int, int]:
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return cfg.num_hidden_layers, cfg.num_key_value_heads, hd


def decode_state(env: Env, cfg, b: int, ctx: int, shards: int = 1) -> dict:
    """A decode step's inputs: a DynamicCache of ``ctx`` random K/V rows per layer for ``b``
    sequences, and one new token each; ``shards``: tensor parallel, this GPU's K/V heads."""
    import torch
    from transformers import DynamicCache

    n_layers, kvh, hd = dims(cfg)
    kvh //= shards
    cache = DynamicCache(config=cfg)
    for layer in range(n_layers):
        k = torch.randn(b, kvh, ctx, hd, device=env.device, dtype=torch.bfloat16)
        v = torch.randn(b, kvh, ctx, hd, device=env.device, dtype=torch.bfloat16)
        cache.update(k, v, layer)
        del k, v
    return {"cache": cache, "ids": torch.randint(0, cfg.vocab_size, (b, 1), device=env.device)}


def decode_points_eager(env: Env, model, cfg, grid, workload: str = "llama-3-8b",
                        shards: int = 1) -> list[Point]:  # fmt: skip
    import torch

    pts = []
    for b, ctx in grid:

        def setup(b=b, ctx=ctx):
            return decode_state(env, cfg, b, ctx, shards)

        @torch.no_grad()
        def step(s):
            model(input_ids=s["ids"], past_key_values=s["cache"], use_cache=True)

        pts.append(Point({"workload": workload, "runtime": "hf-eager", "phase": "decode",
                          "policy": "bf16", "batch": b, "seq": ctx, "context": ctx}, setup, step,
                         tokens=b, details={"cache": "DynamicCache, random K/V of length "
                         "`context` (grows by 1 per step: warm-up + timed steps)",
                         "attn_implementation": "sdpa", "logits": "1 position (decode)",
                         "grad": "torch.no_grad"}))  # fmt: skip
    return pts


def prefill_points_eager(env: Env, model, cfg, grid, workload: str = "llama-3-8b") -> list[Point]:
    import torch

    pts = []
    for b, s_len in grid:

        def setup(b=b, s_len=s_len):
            return {"ids": torch.randint(0, cfg.vocab_size, (b, s_len), device=env.device)}

        @torch.no_grad()
        def step(s):
            model(input_ids=s["ids"], use_cache=True, logits_to_keep=1)

        pts.append(Point({"workload": workload, "runtime": "hf-eager", "phase": "prefill",
                          "policy": "bf16", "batch": b, "seq": s_len, "context": 0}, setup, step,
                         tokens=b * s_len, details={"cache": "DynamicCache created by the model "
                         "(use_cache=True), freed after the step", "attn_implementation": "sdpa",
                         "logits_to_keep": 1, "grad": "torch.no_grad"}))  # fmt: skip
    return pts


def static_points(
    env: Env, model, cfg, grid, prefill_grid, deadline: float, workload: str = "llama-3-8b"
) -> list[Point]:
    """StaticCache + torch.compile(model.forward, mode='reduce-overhead') decode points."""
    import torch
    from transformers import StaticCache

    _, kvh, hd = dims(cfg)
    dev, dtype = env.device, torch.bfloat16
    room = 64
    eager_forward = model.forward
    # HF's CompileConfig defaults (mode reduce-overhead, fullgraph False); dynamic=False so that each
    # (batch, cache length) gets its own static graph instead of a dynamic-shape recompile
    compiled = torch.compile(model.forward, mode="reduce-overhead", fullgraph=False, dynamic=False)
    pts = []
    last_compile_s = 0.0
    for b, ctx in grid:
        if time.perf_counter() + 1.2 * last_compile_s > deadline:
            log(f"static b{b} ctx{ctx}: skipped (compile time budget; last compile "
                f"{last_compile_s:.0f} s)")  # fmt: skip
            continue
        cache = StaticCache(config=cfg, max_cache_len=ctx + room)
        cache.early_initialization(batch_size=b, num_heads=kvh, head_dim=hd, dtype=dtype,
                                   device=torch.device(dev))  # fmt: skip
        for layer in cache.layers:
            layer.keys.normal_()
            layer.values.normal_()
            layer.cumulative_length.fill_(ctx)
        ids = torch.randint(0, cfg.vocab_size, (b, 1), device=dev)

        @torch.no_grad()
        def step(s, cache=cache, ids=ids):
            torch.compiler.cudagraph_mark_step_begin()
            compiled(input_ids=ids, past_key_values=cache, use_cache=True)

        def setup(cache=cache, ctx=ctx):
            for layer in cache.layers:
                layer.cumulative_length.fill_(ctx)
            return {}

        p = Point({"workload": workload, "runtime": "hf-static-compiled", "phase": "decode",
                   "policy": "bf16", "batch": b, "seq": ctx, "context": ctx}, setup, step,
                  tokens=b, details={"cache": f"StaticCache(max_cache_len=context+{room}), "
                  "random K/V, cumulative_length reset to `context` each round",
                  "compile": "torch.compile(model.forward, mode='reduce-overhead', "
                  "fullgraph=False, dynamic=False)", "attn_implementation": "sdpa",
                  "grad": "torch.no_grad"})  # fmt: skip
        try:
            env.sync()
            t0 = time.perf_counter()
            for _ in range(3):
                step({})
            env.sync()
            last_compile_s = time.perf_counter() - t0
            p.details["compile_and_capture_s"] = round(last_compile_s, 2)
            try:
                from torch._dynamo.utils import counters

                p.details["dynamo_unique_graphs_so_far"] = int(counters["stats"]["unique_graphs"])
                p.details["dynamo_graph_breaks_so_far"] = sum(counters["graph_break"].values())
            except Exception:
                pass
            log(
                f"static b{b} ctx{ctx}: compiled + captured in {p.details['compile_and_capture_s']} s"
            )
        except Exception as exc:
            p.status = "oom" if is_oom(exc) else "error"
            p.error = f"{type(exc).__name__}: {exc}"[:500]
            log(f"static b{b} ctx{ctx}: {p.status}: {p.error[:300]}")
            traceback.print_exc()
        pts.append(p)
    for b, s_len in prefill_grid:
        cache = StaticCache(config=cfg, max_cache_len=s_len + room)
        cache.early_initialization(batch_size=b, num_heads=kvh, head_dim=hd, dtype=dtype,
                                   device=torch.device(dev))  # fmt: skip

        def setup(b=b, s_len=s_len):
            return {"ids": torch.randint(0, cfg.vocab_size, (b, s_len), device=dev)}

        @torch.no_grad()
        def pstep(s, cache=cache):
            for layer in cache.layers:
                layer.cumulative_length.zero_()
            eager_forward(input_ids=s["ids"], past_key_values=cache, use_cache=True,
                          logits_to_keep=1)  # fmt: skip

        pts.append(Point({"workload": workload, "runtime": "hf-static-compiled",
                          "phase": "prefill", "policy": "bf16", "batch": b, "seq": s_len,
                          "context": 0}, setup, pstep, tokens=b * s_len,
                         details={"cache": f"StaticCache(max_cache_len=seq+{room})",
                                  "compile": "none: HF runs the prefill of a static-cache "
                                  "generation uncompiled", "logits_to_keep": 1,
                                  "note": "includes cumulative_length.zero_() per layer"}))  # fmt: skip
    return pts


def train_points(
    env: Env, name: str, model, cfg, policy: str, batches, seq: int | None
) -> list[Point]:
    """Training points of ``model``, all stepping one AdamW: ``batches`` at ``seq``, or (batch,
    seq) pairs with ``seq`` None. (One optimizer per model: a second one's states would sit in
    every point's peak memory, as they did in steps-h200-moe-train-run2.)"""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=env.cuda,
                            foreach=None if env.cuda else False)  # fmt: skip
    pts = []
    losses: list[float] = []
    pairs = list(batches) if seq is None else [(b, seq) for b in batches]
    for b, seq in pairs:  # each point's closures bind their own b and seq

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
            if not losses:
                losses.append(float(loss))

        weights = {"amp": "fp32, bf16 autocast",
                   "fp32": "fp32 (no autocast), fp32 grads and AdamW states; TF32 matmuls off",
                   "tf32": "fp32 (no autocast), fp32 grads and AdamW states; TF32 matmuls on "
                           "(torch.backends.cuda.matmul.allow_tf32 = True)"}.get(
            policy, "bf16 (model.to(bfloat16)), bf16 grads and AdamW states")  # fmt: skip
        key = {"workload": name, "runtime": "hf-eager", "phase": "train",
               "policy": "fp32" if policy == "tf32" else policy, "batch": b, "seq": seq,
               "context": 0}  # fmt: skip
        if policy in ("fp32", "tf32"):
            key["dtype"] = policy  # the matmuls' precision
        pts.append(Point(key, setup, step, tokens=b * seq,
                         details={"optimizer": "torch.optim.AdamW(fused=True), "
                         "zero_grad(set_to_none=True)", "loss": "HF labels= (logits upcast "
                         "to fp32 in the loss)", "weights": weights,
                         "attn_implementation": "sdpa"}))  # fmt: skip
    pts[0].details["first_loss"] = losses  # filled by the first step (a finite number)
    return pts


# --------------------------------------------------------------------------- parts


def env_info(env: Env) -> dict:
    import torch

    try:
        import transformers

        tv = transformers.__version__
    except Exception:
        tv = None
    info = {"hostname": socket.gethostname(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": tv,
            "cuda_runtime": getattr(torch.version, "cuda", None), "device": env.device,
            "cpu_cores": os.cpu_count(), "os_kernel": platform.release()}  # fmt: skip
    if env.cuda:
        prop = torch.cuda.get_device_properties(0)
        info.update({"gpu": prop.name, "gpu_memory_bytes": int(prop.total_memory),
                     "sm_count": prop.multi_processor_count})  # fmt: skip
    return info


def part_llama(env: Env, parts: set[str], args, out_dir: Path, result: dict) -> None:
    import torch

    tiny = args.tiny
    cfg = llama3_8b_config(tiny)
    t0 = time.perf_counter()
    model = build_causal_lm(env, cfg, torch.bfloat16).eval()
    env.sync()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"llama-3-8b built: {n_params / 1e9:.3f} B params in {time.perf_counter() - t0:.1f} s")
    result["models"]["llama-3-8b"] = {"params": n_params, "config": cfg.to_dict()}
    deadline = T0 + args.budget_s
    to_trace: list = []
    eager_pts: list = []
    if "decode" in parts:
        grid = [(b, c) for c in ((16, 32) if tiny else (512, 2048, 4096))
                for b in ((1, 2, 4) if tiny else (1, 8, 32, 64))]  # fmt: skip
        pts = decode_points_eager(env, model, cfg, grid)
        run_round_robin(env, pts, args.rounds, 2, args.steps, deadline - 0.35 * args.budget_s)
        traced = next(
            p for p in pts if (p.key["batch"], p.key["seq"]) == ((2, 32) if tiny else (8, 2048))
        )
        to_trace.append((traced, "trace-llama3-8b-decode-eager"))
        eager_pts += pts
    if "prefill" in parts:
        grid = ([(1, 16), (1, 32), (2, 16), (2, 32), (4, 32), (1, 64)] if tiny else
                [(1, 128), (1, 512), (1, 1024), (1, 2048), (4, 512), (4, 2048), (8, 2048)])  # fmt: skip
        pts = prefill_points_eager(env, model, cfg, grid)
        run_round_robin(env, pts, args.rounds, 1, args.steps, deadline - 0.15 * args.budget_s)
        traced = next(
            p for p in pts if (p.key["batch"], p.key["seq"]) == ((2, 16) if tiny else (4, 512))
        )
        to_trace.append((traced, "trace-llama3-8b-prefill-eager"))
        eager_pts += pts
    if "static" in parts:
        grid = [(1, 16), (2, 16)] if tiny else [(1, 2048), (16, 2048), (16, 4096), (1, 4096)]
        pgrid = [(1, 16)] if tiny else [(1, 512)]
        traced_at = None
        if args.static_grid == "wide" and not tiny:  # a call of its own: room for more compiles
            grid += [(8, 1024), (32, 2048)]
            pgrid = [(1, 128), (1, 512), (1, 2048), (4, 512)]
        elif args.static_grid == "graph2":  # written 2026-11-29 (seventh session) before the run:
            # compiled decode only, one point traced (#18 on a graph-replayed trace)
            grid = [(2, 16), (4, 32)] if tiny else [(4, 1024), (16, 1024), (48, 2048), (24, 4096)]
            pgrid, traced_at = [], (2, 16) if tiny else (16, 1024)
        elif args.static_grid == "grid3":  # written 2026-11-30 (ninth session) before the run and
            # before any change for the compiled attention it checks: decode only, new points
            grid = [(2, 16), (3, 32)] if tiny else [(2, 3072), (12, 1536), (24, 2048), (64, 1024),
                                                     (8, 6144)]  # fmt: skip
            pgrid = []
        elif args.static_grid == "grid4":  # written 2026-11-30 (ninth session) before the run and
            # before any change for the repeat_kv copies' rate: decode only, new points
            grid = [(2, 16), (3, 16)] if tiny else [(40, 1280), (6, 2560), (96, 512), (16, 5120)]
            pgrid = []
        pts = static_points(env, model, cfg, grid, pgrid, deadline - (70 if traced_at else 45))
        run_round_robin(env, pts, args.rounds, 2, args.steps,
                        deadline - (40 if traced_at else 0))  # fmt: skip
        static_records = {id(p): p.record() for p in pts}
        result["records"] += list(static_records.values())
        for p in pts:  # traced last (a profiler session can slow the host)
            if (p.key["batch"], p.key["seq"]) == traced_at and p.status == "ok":
                tag = f"trace-llama3-8b-static-decode-b{traced_at[0]}x{traced_at[1]}"
                result["traces"].append(trace_point(env, p, out_dir, tag, False))
                static_records[id(p)]["traced"] = p.traced
    # recorded before tracing (a timeout kill keeps them); traced last: a profiler session can
    # leave the process slower (see the module docstring)
    records = {id(p): p.record() for p in eager_pts}
    result["records"] += list(records.values())
    for traced, name in to_trace:
        result["traces"].append(trace_point(env, traced, out_dir, name, False))
        records[id(traced)]["traced"] = traced.traced
    del model
    env.fresh_memory()


def part_arch(env: Env, args, out_dir: Path, result: dict) -> None:
    """Other architectures than the set's own, measured alike (added 2026-11-29, before any
    prediction was compared with them): Llama-2-7B (32 KV heads: a KV cache and DynamicCache
    concatenation 4x Llama-3-8B's per token; vocabulary 32000) eager decode and prefill and a
    full bf16 training step on one GPU; Mistral-7B (sliding window 4096) eager decode and
    prefill, below, at and past the window, with traces at the window (run 2 on, 2026-11-29:
    run 1 found the window's steps slower than the model; run 3 adds points past it)."""
    import torch

    tiny = args.tiny
    plans = [
        ("llama-2-7b", llama2_7b_config(tiny),
         [(1, 16), (2, 32)] if tiny else [(1, 512), (8, 512), (32, 512), (1, 2048), (8, 2048), (32, 2048)],
         [(1, 16), (2, 32)] if tiny else [(1, 512), (1, 2048), (4, 2048)]),
        ("mistral-7b", mistral_7b_config(tiny),
         [(1, 16), (2, 48)] if tiny else [(1, 2048), (16, 2048), (1, 4096), (8, 4096),
                                          (32, 4096), (8, 6000)],
         [(1, 16), (2, 48)] if tiny else [(1, 1024), (1, 3072), (1, 4096), (2, 4096), (1, 6144)]),
    ]  # fmt: skip
    deadline = T0 + args.budget_s
    for i, (name, cfg, dgrid, pgrid) in enumerate(plans):
        t0 = time.perf_counter()
        model = build_causal_lm(env, cfg, torch.bfloat16).eval()
        env.sync()
        n_params = sum(p.numel() for p in model.parameters())
        log(f"{name} built: {n_params / 1e9:.3f} B params in {time.perf_counter() - t0:.1f} s")
        result["models"][name] = {"params": n_params, "config": cfg.to_dict()}
        pts = decode_points_eager(env, model, cfg, dgrid, name)
        pts += prefill_points_eager(env, model, cfg, pgrid, name)
        share = (deadline - time.perf_counter()) / (len(plans) - i + 1)
        run_round_robin(env, pts, args.rounds, 2, args.steps, time.perf_counter() + share)
        records = [p.record() for p in pts]
        result["records"] += records
        if name == "mistral-7b":  # the kernels at the window (HF masks from there), traced last
            for p, rec in zip(pts, records):
                if (p.key["batch"], p.key["seq"]) in ((2, 48), (8, 4096), (2, 4096)):
                    tag = f"trace-{name}-{p.key['phase']}-b{p.key['batch']}x{p.key['seq']}"
                    result["traces"].append(trace_point(env, p, out_dir, tag, False))
                    rec["traced"] = p.traced
        if name == "llama-2-7b":  # bf16 weights, grads and AdamW states: 8 B per parameter
            model.train()
            tpts = train_points(env, name, model, cfg, "bf16", (1, 2), 64 if tiny else 2048)
            share = (deadline - time.perf_counter()) / (len(plans) - i)
            run_round_robin(env, tpts, args.rounds, 2, args.steps, time.perf_counter() + share)
            result["records"] += [p.record() for p in tpts]
            del tpts
        del model, pts
        env.fresh_memory()


def part_families(env: Env, args, out_dir: Path, result: dict) -> None:
    """Three more model families, measured alike (added 2026-11-29, third session, before any
    prediction was compared with them; gpumodel has no preset for any of them): Qwen2.5-7B
    (q/k/v biases, 152k vocabulary, 7 query heads per KV head), Qwen3-8B (RMSNorm on q and k
    per head), Phi-3-mini-4k (fused qkv_proj and gate_up_proj, head_dim 96, no GQA, sliding
    window 2047: points below and past it). Eager decode and prefill; one decode step of each
    traced, and Phi-3's prompt past its window. ``--families-grid 2``: other points, written
    after run 1 was scored and the model changed for it, before run 2 ran (a check of the
    change on points it never saw)."""
    tiny = args.tiny
    d, p = "decode", "prefill"
    if tiny:
        small = [(1, 16), (2, 48)]
        plans = [(name, cfg(True), small, small, {(d, (2, 48))}) for name, cfg in
                 (("qwen2.5-7b", qwen2_5_7b_config), ("qwen3-8b", qwen3_8b_config),
                  ("phi-3-mini", phi3_mini_config))]  # fmt: skip
        plans[-1][4].add((p, (2, 48)))
    elif args.families_grid == 3:  # written after run 2 and the V-cat rule, before run 3
        plans = [
            ("qwen2.5-7b", qwen2_5_7b_config(tiny), [(2, 2048), (24, 3072), (48, 1024)],
             [(1, 256), (4, 1024)], set()),
            ("qwen3-8b", qwen3_8b_config(tiny), [(2, 4096), (12, 1536), (48, 1024)],
             [(2, 1024), (1, 3000)], set()),
            ("phi-3-mini", phi3_mini_config(tiny), [(2, 2046), (16, 3500), (48, 1536), (96, 512)],
             [(4, 512), (1, 4000), (3, 2047)], {(d, (16, 3500))}),
        ]  # fmt: skip
    elif args.families_grid == 2:
        plans = [
            ("qwen2.5-7b", qwen2_5_7b_config(tiny), [(1, 1024), (16, 4096), (4, 1024)],
             [(1, 1024), (2, 4096)], {(d, (1, 1024))}),
            ("qwen3-8b", qwen3_8b_config(tiny), [(1, 1024), (16, 1024), (4, 3072), (64, 2048)],
             [(1, 512), (2, 2048), (1, 8192)], {(d, (64, 2048)), (p, (2, 2048))}),
            ("phi-3-mini", phi3_mini_config(tiny), [(4, 1536), (8, 2500), (24, 2047), (64, 1024)],
             [(2, 512), (1, 2500), (2, 3000)], {(d, (64, 1024))}),
        ]  # fmt: skip
    else:
        plans = [
            ("qwen2.5-7b", qwen2_5_7b_config(tiny),
             [(1, 512), (8, 2048), (32, 2048), (8, 4096), (64, 1024)],
             [(1, 512), (1, 2048), (4, 2048)], {(d, (8, 2048))}),
            ("qwen3-8b", qwen3_8b_config(tiny),
             [(1, 512), (8, 2048), (32, 2048), (8, 4096), (32, 4096)],
             [(1, 1024), (1, 4096), (4, 1024)], {(d, (8, 2048))}),
            ("phi-3-mini", phi3_mini_config(tiny),
             [(1, 1024), (16, 1024), (1, 3000), (8, 2048), (32, 3000)],
             [(1, 1024), (4, 1024), (1, 2048), (1, 3072)], {(d, (8, 2048)), (p, (1, 3072))}),
        ]  # fmt: skip
    _families(env, args, out_dir, result, plans)


def _families(env: Env, args, out_dir: Path, result: dict, plans) -> None:
    """Measure ``plans``: (name, config, decode grid, prefill grid, {(phase, point) traced})."""
    import torch

    deadline = T0 + args.budget_s
    for i, (name, cfg, dgrid, pgrid, traced) in enumerate(plans):
        t0 = time.perf_counter()
        model = build_causal_lm(env, cfg, torch.bfloat16).eval()
        env.sync()
        n_params = sum(p.numel() for p in model.parameters())
        log(f"{name} built: {n_params / 1e9:.3f} B params in {time.perf_counter() - t0:.1f} s")
        result["models"][name] = {"params": n_params, "config": cfg.to_dict()}
        pts = decode_points_eager(env, model, cfg, dgrid, name)
        pts += prefill_points_eager(env, model, cfg, pgrid, name)
        share = (deadline - time.perf_counter()) / (len(plans) - i)
        run_round_robin(env, pts, args.rounds, 2, args.steps, time.perf_counter() + share - 15)
        records = [p.record() for p in pts]
        result["records"] += records
        for p, rec in zip(pts, records):  # traced last (a profiler session can slow the host)
            if (p.key["phase"], (p.key["batch"], p.key["seq"])) in traced:
                tag = f"trace-{name}-{p.key['phase']}-b{p.key['batch']}x{p.key['seq']}"
                result["traces"].append(trace_point(env, p, out_dir, tag, False))
                rec["traced"] = p.traced
        del model, pts
        env.fresh_memory()


def with_experts(model, pts: list[Point], impl: str, switch: bool = True) -> list[Point]:
    """``pts`` run with HF's ``experts_implementation`` ``impl`` (set in each point's setup, so
    that points of both kinds can share the rounds; ``switch=False``: the model's own, only
    recorded): "grouped_mm" (transformers 5's default on CUDA: tokens sorted by expert, one
    ``torch._grouped_mm`` per projection) or "eager" (a Python loop over the experts hit,
    transformers 4's way)."""
    for p in pts:

        def setup(base=p.setup):
            model.set_experts_implementation(impl)
            return base()

        if switch:
            p.setup = setup
        p.key["experts"] = impl
        p.details["experts_implementation"] = impl
    return pts


def part_moe(env: Env, args, out_dir: Path, result: dict) -> None:
    """Mixture-of-experts models, measured alike (added 2026-11-29, fourth session, before any
    prediction was compared with them): Mixtral-8x7B (a preset: scored as it stood) and
    Qwen3-30B-A3B (128 experts, top-8; no preset: a user's model file). Eager decode and
    prefill with transformers' default experts implementation (grouped_mm) and a few points
    with its Python loop over experts ("eager"). Random weights: the router's random logits
    spread tokens over experts nearly uniformly (a trained router is less even). One decode
    step of each kind traced."""
    import torch

    tiny = args.tiny
    deadline = T0 + args.budget_s
    d = "decode"
    if tiny:
        small = [(1, 16), (2, 48)]
        plans = [(name, cfg(True), small, small, [(2, 48)], [(2, 48)],
                  {("grouped_mm", d, (2, 48)), ("eager", d, (2, 48))})
                 for name, cfg in (("mixtral-8x7b", mixtral_8x7b_config),
                                   ("qwen3-30b-a3b", qwen3_30b_a3b_config))]  # fmt: skip
    elif args.moe_grid == 4:  # written after run 3 and the measured MoE layer, before run 4
        plans = [
            ("mixtral-8x7b", mixtral_8x7b_config(tiny),
             [(1, 1024), (12, 2048), (32, 4096)], [(1, 256), (2, 2048)],
             [(2, 4096)], [], set()),
            ("qwen3-30b-a3b", qwen3_30b_a3b_config(tiny),
             [(1, 2048), (8, 1024), (48, 1024)], [(1, 512), (4, 2048)],
             [(1, 2048)], [], set()),
        ]  # fmt: skip
    elif args.moe_grid == 3:  # written after run 2 and the measured MoE block, before run 3
        plans = [
            ("mixtral-8x7b", mixtral_8x7b_config(tiny),
             [(1, 2048), (24, 1024), (8, 4096)], [(1, 1024), (3, 2048)],
             [(16, 2048)], [], set()),
            ("qwen3-30b-a3b", qwen3_30b_a3b_config(tiny),
             [(2, 1024), (32, 4096), (64, 2048)], [(2, 512), (1, 3072)],
             [(4, 2048)], [], set()),
        ]  # fmt: skip
    elif args.moe_grid == 2:  # written after run 1 was scored and the model changed for it
        plans = [
            ("mixtral-8x7b", mixtral_8x7b_config(tiny),
             [(2, 1024), (16, 4096), (48, 2048)], [(2, 1024), (1, 4096)],
             [(4, 1024)], [], set()),
            ("qwen3-30b-a3b", qwen3_30b_a3b_config(tiny),
             [(4, 4096), (16, 1024), (128, 512)], [(4, 1024), (1, 2048)],
             [(2, 2048)], [], set()),
        ]  # fmt: skip
    else:
        plans = [
            ("mixtral-8x7b", mixtral_8x7b_config(tiny),
             [(1, 512), (8, 2048), (32, 2048), (4, 4096), (64, 1024)],
             [(1, 512), (1, 2048), (4, 2048)],
             [(1, 512), (8, 2048), (32, 1024)], [(1, 2048)],
             {("grouped_mm", d, (8, 2048)), ("eager", d, (8, 2048))}),
            ("qwen3-30b-a3b", qwen3_30b_a3b_config(tiny),
             [(1, 1024), (8, 2048), (32, 2048), (64, 1024)],
             [(1, 1024), (2, 2048), (1, 4096)],
             [(1, 1024), (8, 1024)], [],
             {("grouped_mm", d, (8, 2048))}),
        ]  # fmt: skip
    if args.moe_models:
        keep = set(args.moe_models.split(","))
        plans = [plan for plan in plans if plan[0] in keep]
    for i, (name, cfg, dgrid, pgrid, loop_d, loop_p, traced) in enumerate(plans):
        t0 = time.perf_counter()
        model = build_causal_lm(env, cfg, torch.bfloat16).eval()
        env.sync()
        n_params = sum(q.numel() for q in model.parameters())
        default_impl = model.config._experts_implementation
        log(f"{name} built: {n_params / 1e9:.3f} B params in {time.perf_counter() - t0:.1f} s, "
            f"experts_implementation {default_impl}")  # fmt: skip
        result["models"][name] = {"params": n_params, "config": cfg.to_dict(),
                                  "default_experts_implementation": default_impl}  # fmt: skip
        grouped = decode_points_eager(env, model, cfg, dgrid, name)
        grouped += prefill_points_eager(env, model, cfg, pgrid, name)
        loop = decode_points_eager(env, model, cfg, loop_d, name)
        loop += prefill_points_eager(env, model, cfg, loop_p, name)
        pts = with_experts(model, grouped, "grouped_mm") + with_experts(model, loop, "eager")
        share = (deadline - time.perf_counter()) / (len(plans) - i)
        run_round_robin(env, pts, args.rounds, 2, args.steps, time.perf_counter() + share - 25)
        records = [q.record() for q in pts]
        result["records"] += records
        for q, rec in zip(pts, records):  # traced last (a profiler session can slow the host)
            k = q.key
            if (k["experts"], k["phase"], (k["batch"], k["seq"])) in traced:
                tag = f"trace-{name}-{k['experts']}-{k['phase']}-b{k['batch']}x{k['seq']}"
                result["traces"].append(trace_point(env, q, out_dir, tag, False))
                rec["traced"] = q.traced
        del model, pts, grouped, loop, q  # the points' closures hold the model
        env.fresh_memory()


def part_moe_train(env: Env, args, out_dir: Path, result: dict) -> None:
    """Mixture-of-experts training steps and compiled MoE decoding (added 2026-11-29, fifth
    session, before any prediction was compared with them). Training, as a user trains a small
    MoE from scratch on one GPU with HF (grouped_mm experts, transformers' default; no router
    auxiliary loss, HF's default output_router_logits=False): a Qwen3-MoE of 1.87 B parameters
    (64 experts, top-8) amp and bf16, and a Mixtral-layout model of 3.60 B (8 experts, top-2)
    bf16 and amp, at sequence 2048; one step of each model traced (with memory). Then
    `hf-static-compiled` decode of Qwen3-30B-A3B and Mixtral-8x7B (StaticCache +
    torch.compile reduce-overhead, as for the dense models)."""
    import torch

    tiny = args.tiny
    deadline = T0 + args.budget_s
    qwen, mixtral = qwen3_moe_small_config(tiny), mixtral_small_config(tiny)
    # (model, config, policy, {seq: batches}, traced batch at the first seq)
    traced_static: set = set()
    if tiny:
        plans = [("qwen3-moe-1.9b", qwen, "amp", {48: (1, 2)}, 2),
                 ("mixtral-3.6b", mixtral, "bf16", {48: (1, 2)}, 2)]  # fmt: skip
        static = [("qwen3-30b-a3b", qwen3_30b_a3b_config(True), [(1, 16)])]
        traced_static = {("qwen3-30b-a3b", 1, 16)}
    elif args.moe_grid == 4:  # written after run 3 was scored and the compiled MoE traced
        plans = [("qwen3-moe-1.9b", qwen, "amp", {1536: (2,), 2048: (5,)}, None),
                 ("qwen3-moe-1.9b", qwen, "bf16", {1536: (4,), 4096: (3,)}, None),
                 ("mixtral-3.6b", mixtral, "bf16", {1536: (4,), 3072: (1,)}, None),
                 ("mixtral-3.6b", mixtral, "amp", {1536: (2,)}, None)]  # fmt: skip
        static = [("mixtral-8x7b", mixtral_8x7b_config(False), [(16, 1024)]),
                  ("qwen3-30b-a3b", qwen3_30b_a3b_config(False), [(4, 4096)])]  # fmt: skip
        traced_static = {("mixtral-8x7b", 16, 1024)}
    elif args.moe_grid == 3:  # written after run 2 was scored (its peaks held two AdamWs)
        plans = [("qwen3-moe-1.9b", qwen, "amp", {1024: (4,), 3072: (1,)}, None),
                 ("qwen3-moe-1.9b", qwen, "bf16", {1024: (8,), 3072: (2,)}, None),
                 ("mixtral-3.6b", mixtral, "bf16", {1024: (2, 6)}, None),
                 ("mixtral-3.6b", mixtral, "amp", {2048: (3,)}, None)]  # fmt: skip
        static = [("mixtral-8x7b", mixtral_8x7b_config(False), [(1, 4096)]),
                  ("qwen3-30b-a3b", qwen3_30b_a3b_config(False), [(16, 1024)])]  # fmt: skip
    elif args.moe_grid == 2:  # written after run 1 was scored and the model changed for it
        plans = [("qwen3-moe-1.9b", qwen, "amp", {2048: (3,), 4096: (1,)}, None),
                 ("qwen3-moe-1.9b", qwen, "bf16", {2048: (1, 6), 4096: (2,)}, None),
                 ("mixtral-3.6b", mixtral, "bf16", {2048: (3,), 4096: (2,)}, None),
                 ("mixtral-3.6b", mixtral, "amp", {4096: (1,), 1024: (4,)}, None)]  # fmt: skip
        static = [("qwen3-30b-a3b", qwen3_30b_a3b_config(False), [(8, 2048)]),
                  ("mixtral-8x7b", mixtral_8x7b_config(False), [(1, 4096)])]  # fmt: skip
        traced_static = {("qwen3-30b-a3b", 8, 2048)}
    else:
        plans = [("qwen3-moe-1.9b", qwen, "amp", {2048: (1, 2, 4)}, 2),
                 ("qwen3-moe-1.9b", qwen, "bf16", {2048: (2, 4, 8)}, None),
                 ("mixtral-3.6b", mixtral, "bf16", {2048: (1, 2, 4)}, 2),
                 ("mixtral-3.6b", mixtral, "amp", {2048: (1, 2)}, None)]  # fmt: skip
        static = [("qwen3-30b-a3b", qwen3_30b_a3b_config(False), [(1, 2048), (16, 1024)]),
                  ("mixtral-8x7b", mixtral_8x7b_config(False), [(8, 2048)])]  # fmt: skip
    train_end = deadline - (20 if tiny else 200)  # what the compiled decode points need
    for i, (name, cfg, policy, grid, trace_b) in enumerate(plans):
        dtype = torch.float32 if policy == "amp" else torch.bfloat16
        model = build_causal_lm(env, cfg, dtype).train()
        result["models"].setdefault(name, {"params": sum(p.numel() for p in model.parameters()),
                                           "config": cfg.to_dict(),
                                           "default_experts_implementation":
                                           model.config._experts_implementation})  # fmt: skip
        pairs = [(b, seq) for seq, batches in grid.items() for b in batches]
        pts = with_experts(model, train_points(env, name, model, cfg, policy, pairs, None),
                           model.config._experts_implementation, switch=False)  # fmt: skip
        share = (train_end - time.perf_counter()) / (len(plans) - i)
        run_round_robin(env, pts, args.rounds, 2, args.steps,
                        time.perf_counter() + share - (15 if trace_b else 0))  # fmt: skip
        result["records"] += [p.record() for p in pts]
        if trace_b is not None:
            traced = next(p for p in pts if p.key["batch"] == trace_b)
            tag = f"trace-{name}-train-{policy}"
            result["traces"].append(trace_point(env, traced, out_dir, tag, True))
            traced = None
        del model, pts
        env.fresh_memory()
    for i, (name, cfg, grid) in enumerate(static):
        model = build_causal_lm(env, cfg, torch.bfloat16).eval()
        result["models"].setdefault(name, {"params": sum(p.numel() for p in model.parameters()),
                                           "config": cfg.to_dict()})  # fmt: skip
        share = (deadline - time.perf_counter()) / (len(static) - i)
        pts = with_experts(model, static_points(env, model, cfg, grid, [],
                                                time.perf_counter() + share - 30, name),
                           model.config._experts_implementation, switch=False)  # fmt: skip
        run_round_robin(env, pts, args.rounds, 2, args.steps,
                        time.perf_counter() + share - (25 if traced_static else 5))  # fmt: skip
        records = [p.record() for p in pts]
        result["records"] += records
        for q, rec in zip(pts, records):  # one compiled step traced (its graph's kernels)
            if (name, q.key["batch"], q.key["seq"]) in traced_static and q.status == "ok":
                tag = f"trace-{name}-static-decode-b{q.key['batch']}x{q.key['seq']}"
                result["traces"].append(trace_point(env, q, out_dir, tag, False))
                rec["traced"] = q.traced
        del model, pts, q  # the points' closures hold the model
        env.fresh_memory()


def part_family_train(env: Env, args, out_dir: Path, result: dict) -> None:
    """Training steps and compiled decoding of the new families (added 2026-11-29, third
    session, before any prediction was compared with them): Qwen3-0.6B (q/k norms in the
    backward too, tied embeddings, a 152k vocabulary) amp and bf16; Phi-3-mini bf16 (fused
    projections; seq 1024, below its window); Qwen3-8B under hf-static-compiled (the compiled
    q/k norm). One amp step of Qwen3-0.6B and one of Phi-3 traced."""
    import torch

    tiny = args.tiny
    deadline = T0 + args.budget_s
    plans = [("qwen3-0.6b", qwen3_0_6b_config(tiny), "amp", (1, 2) if tiny else (2, 4, 8), 4),
             ("qwen3-0.6b", qwen3_0_6b_config(tiny), "bf16", (1, 2) if tiny else (2, 4, 8), None),
             ("phi-3-mini", phi3_mini_config(tiny), "bf16", (1, 2) if tiny else (1, 2, 4), 2)]  # fmt: skip
    seq = 48 if tiny else 1024
    for i, (name, cfg, policy, batches, trace_b) in enumerate(plans):
        dtype = torch.float32 if policy == "amp" else torch.bfloat16
        model = build_causal_lm(env, cfg, dtype).train()
        result["models"].setdefault(name, {"params": sum(p.numel() for p in model.parameters()),
                                           "config": cfg.to_dict()})  # fmt: skip
        pts = train_points(env, name, model, cfg, policy, batches, seq)
        share = (deadline - 150 - time.perf_counter()) / (len(plans) - i)
        run_round_robin(env, pts, args.rounds, 2, args.steps, time.perf_counter() + share)
        result["records"] += [p.record() for p in pts]
        if trace_b is not None:
            traced = next(p for p in pts if p.key["batch"] == (batches[-1] if tiny else trace_b))
            tag = f"trace-{name}-train-{policy}"
            result["traces"].append(trace_point(env, traced, out_dir, tag, True))
            traced = None
        del model, pts
        env.fresh_memory()
    cfg = qwen3_8b_config(tiny)
    model = build_causal_lm(env, cfg, torch.bfloat16).eval()
    result["models"].setdefault("qwen3-8b", {"params": sum(p.numel() for p in model.parameters()),
                                             "config": cfg.to_dict()})  # fmt: skip
    grid = [(1, 16), (2, 16)] if tiny else [(1, 2048), (16, 2048)]
    pts = static_points(env, model, cfg, grid, [], deadline - 40, "qwen3-8b")
    run_round_robin(env, pts, args.rounds, 2, args.steps, deadline)
    result["records"] += [p.record() for p in pts]
    del model, pts
    env.fresh_memory()


def padded_points(env: Env, model, cfg, dgrid, pgrid) -> list[Point]:
    """Batched HF steps with left padding, as ``generate`` runs a batch of prompts of unequal
    length: an ``attention_mask`` (batch, keys) with the first eighth of every other sequence
    masked; decode appends a column of ones each step, as ``generate`` does."""
    import torch

    dev = env.device

    def mask(b: int, n: int):
        m = torch.ones(b, n, dtype=torch.long, device=dev)
        m[::2, : n // 8] = 0
        return m

    pts = []
    for b, ctx in dgrid:

        def setup(b=b, ctx=ctx):
            return {**decode_state(env, cfg, b, ctx), "mask": mask(b, ctx)}

        @torch.no_grad()
        def step(s):
            ones = torch.ones(s["mask"].shape[0], 1, dtype=s["mask"].dtype, device=dev)
            s["mask"] = torch.cat([s["mask"], ones], dim=-1)
            model(input_ids=s["ids"], attention_mask=s["mask"], past_key_values=s["cache"],
                  use_cache=True)  # fmt: skip

        pts.append(Point({"workload": "llama-3-8b", "runtime": "hf-eager", "phase": "decode",
                          "policy": "bf16", "batch": b, "seq": ctx, "context": ctx,
                          "mask": "padding"}, setup, step, tokens=b,
                         details={"attention_mask": "left padding: 1/8 of the keys of every "
                                  "other sequence masked; one column appended per step"}))  # fmt: skip
    for b, s_len in pgrid:

        def psetup(b=b, s_len=s_len):
            return {"ids": torch.randint(0, cfg.vocab_size, (b, s_len), device=dev),
                    "mask": mask(b, s_len)}  # fmt: skip

        @torch.no_grad()
        def pstep(s):
            model(input_ids=s["ids"], attention_mask=s["mask"], use_cache=True, logits_to_keep=1)

        pts.append(Point({"workload": "llama-3-8b", "runtime": "hf-eager", "phase": "prefill",
                          "policy": "bf16", "batch": b, "seq": s_len, "context": 0,
                          "mask": "padding"}, psetup, pstep, tokens=b * s_len,
                         details={"attention_mask": "left padding: 1/8 of the tokens of every "
                                  "other prompt masked"}))  # fmt: skip
    return pts


def part_padded(env: Env, args, out_dir: Path, result: dict) -> None:
    """Llama-3-8B eager decode and prefill of padded batches (added 2026-11-29, before any
    prediction was compared with them): what a user's batched ``generate`` runs. HF then passes
    SDPA an explicit mask (GQA by ``repeat_kv``), the model's ``gqa="repeat"``."""
    import torch

    tiny = args.tiny
    cfg = llama3_8b_config(tiny)
    model = build_causal_lm(env, cfg, torch.bfloat16).eval()
    env.sync()
    result["models"]["llama-3-8b"] = {"params": sum(p.numel() for p in model.parameters()),
                                      "config": cfg.to_dict()}  # fmt: skip
    dgrid = [(2, 16), (4, 32)] if tiny else [(8, 512), (8, 2048), (32, 2048), (8, 4096), (32, 4096)]
    pgrid = [(2, 16), (4, 32)] if tiny else [(4, 512), (4, 2048), (8, 1024), (2, 4096)]
    pts = padded_points(env, model, cfg, dgrid, pgrid)
    run_round_robin(env, pts, args.rounds, 2, args.steps, T0 + args.budget_s - 30)
    result["records"] += [p.record() for p in pts]
    del model, pts
    env.fresh_memory()


def part_fused(env: Env, args, out_dir: Path, result: dict) -> None:
    """Llama-3-8B decode on a vLLM-style engine written for the purpose (``fused_engine.py``:
    fused QKV and gate+up GEMMs, Triton norms, RoPE, cache write and SiLU x up, FlashAttention
    through SDPA, static cache, one CUDA graph per step): gpumodel's ``fused-graph``. The grid of
    the eager decode; one trace at batch 8 x 2048 for its kernel list. The engine's logits are
    checked against the same maths in plain torch ops at one point first."""
    import torch
    from fused_engine import Engine, dims_of

    tiny = args.tiny
    cfg = llama3_8b_config(tiny)
    t0 = time.perf_counter()
    eng = Engine(torch, dims_of(cfg), env.device)
    env.sync()
    log(f"fused engine built: {eng.params / 1e9:.3f} B params in {time.perf_counter() - t0:.1f} s")
    result["models"].setdefault("llama-3-8b", {"params": eng.params, "config": cfg.to_dict()})
    result["fused_check"] = fused_check(env, eng, (2, 16) if tiny else (8, 2048))
    grid = [(b, c) for c in ((16, 32) if tiny else (512, 2048, 4096))
            for b in ((1, 2, 4) if tiny else (1, 8, 32, 64))]  # fmt: skip
    target = (2, 16) if tiny else (8, 2048)
    if args.fused_grid == 2 and not tiny:  # written 2026-11-29 (seventh session) before the run
        grid = [(b, c) for c in (1024, 3072) for b in (2, 16, 48, 96)]
        target = (16, 3072)
    pts = fused_decode_points(eng, "llama-3-8b", grid, {}, {
        "engine": "validation/unseen/fused_engine.py (a vLLM-style stand-in, not vLLM)",
        "cache": "static, random K/V of `context` positions; each step writes position "
        "`context` and attends to context + 1", "graph": "one CUDA graph per point, replayed"})  # fmt: skip
    with torch.no_grad():
        run_round_robin(env, pts, args.rounds, 2, args.steps, T0 + args.budget_s - 30)
        records = {id(p): p.record() for p in pts}
        result["records"] += list(records.values())
        traced = next(p for p in pts if (p.key["batch"], p.key["seq"]) == target)
        name = "trace-llama3-8b-decode-fused" + ("" if args.fused_grid == 1 else
                                                 f"-b{target[0]}x{target[1]}")  # fmt: skip
        result["traces"].append(trace_point(env, traced, out_dir, name, False))
        records[id(traced)]["traced"] = traced.traced


def fused_decode_points(eng, workload: str, grid, key: dict, details: dict) -> list[Point]:
    """One decode Point of the fused engine ``eng`` per (batch, context) of ``grid``: a fresh
    static cache and CUDA graph per round, the graph replayed per step; ``key`` adds to each
    record's key, ``details`` to its details."""
    import torch
    from fused_engine import DecodeState

    pts = []
    for b, ctx in grid:

        def setup(b=b, ctx=ctx):
            state = DecodeState(eng, b, ctx)
            state.capture()
            return state

        @torch.no_grad()
        def step(state):
            state.step()

        pts.append(Point({"workload": workload, "runtime": "fused-graph", "phase": "decode",
                          "policy": "bf16", "batch": b, "seq": ctx, "context": ctx, **key},
                         setup, step, tokens=b, details={
                         **details, "attention": "SDPA, FlashAttention backend, enable_gqa"}))  # fmt: skip
    return pts


def fused_check(env: Env, eng, point: tuple[int, int]) -> dict:
    """The engine's step (Triton kernels, graph) against the same maths in torch ops: the max
    |difference| of the logits over their max |value| (bf16 rounding through 32 random layers:
    4.5% on the H200 runs of 2026-11-29)."""
    import torch
    from fused_engine import DecodeState

    backend = "flash"
    with torch.no_grad():
        state = DecodeState(eng, *point)
        try:
            state.capture()
        except RuntimeError as exc:  # no flash kernel for this call in this torch
            log(f"fused engine: SDPA's flash backend refused ({str(exc)[:120]}); default SDPA")
            eng.flash, backend = False, f"default (flash refused: {str(exc)[:200]})"
            env.fresh_memory()
            state = DecodeState(eng, *point)
            state.capture()
        state.step()
        env.sync()
        fused = state.logits.float().clone()
        state.cuda = False  # the torch-ops path over the same weights, cache and inputs
        plain = state.forward().float()
    err = float((fused - plain).abs().max() / plain.abs().max().clamp_min(1e-30))
    log(f"fused engine check at b{point[0]} x {point[1]}: max |diff| / max |logit| = {err:.2e}")
    del state
    env.fresh_memory()
    return {"point": list(point), "rel_max_diff": err, "attention_backend": backend}


def part_train(env: Env, args, out_dir: Path, result: dict) -> None:
    import torch

    tiny = args.tiny
    plans = [("gpt2-small", gpt2_config(tiny), (1, 2, 3) if tiny else (4, 8, 16, 24), 64 if tiny else 1024, 2 if tiny else 8),
             ("tinyllama-1.1b", tinyllama_config(tiny), (1, 2, 3) if tiny else (1, 2, 4, 8), 64 if tiny else 2048, 2)]  # fmt: skip
    n_runs = 4
    done = 0
    for name, cfg, batches, seq, trace_b in plans:
        for policy in ("amp", "bf16"):
            t0 = time.perf_counter()
            dtype = torch.float32 if policy == "amp" else torch.bfloat16
            model = build_causal_lm(env, cfg, dtype).train()
            n_params = sum(p.numel() for p in model.parameters())
            result["models"].setdefault(name, {"params": n_params, "config": cfg.to_dict()})
            log(
                f"{name} {policy}: built {n_params / 1e6:.1f} M params in {time.perf_counter() - t0:.1f} s"
            )
            pts = train_points(env, name, model, cfg, policy, batches, seq)
            remaining = T0 + args.budget_s - time.perf_counter()
            run_round_robin(env, pts, args.rounds, 2, args.steps,
                            time.perf_counter() + remaining / (n_runs - done) * 0.7)  # fmt: skip
            if policy == "amp":
                traced = next(p for p in pts if p.key["batch"] == trace_b)
                result["traces"].append(
                    trace_point(env, traced, out_dir, f"trace-{name}-train-amp", True)
                )
            result["records"] += [p.record() for p in pts]
            done += 1
            # `traced` holds the amp run's Point, whose step closure holds its model and AdamW
            # states: keep it and the bf16 run's peaks include them (12 B per parameter; the
            # steps-*-run2 bf16 peaks do)
            traced = None
            del model, pts, traced
            env.fresh_memory()


def part_train_fp32(env: Env, args, out_dir: Path, result: dict) -> None:
    """Training as a beginner runs it (added 2026-11-30, sixteenth session, before gpumodel
    priced an fp32 policy): an fp32 HF model, no autocast, fused AdamW in fp32; with PyTorch's
    default TF32-off matmuls (``fp32``) and with ``allow_tf32 = True`` (``tf32``). GPT-2 small
    at 1024 tokens and the 1.1B Llama-architecture model at 2048; one fp32 step of GPT-2
    traced."""
    import torch

    tiny = args.tiny
    plans = [("gpt2-small", gpt2_config(tiny), (1, 2) if tiny else (2, 4, 8),
              64 if tiny else 1024, 2 if tiny else 4),
             ("tinyllama-1.1b", tinyllama_config(tiny), (1, 2),
              64 if tiny else 2048, None)]  # fmt: skip
    if args.fp32_grid == 2:  # written after the fp32 policy's model, before its run
        plans = [("qwen3-0.6b", qwen3_0_6b_config(tiny), (1, 2) if tiny else (2, 4),
                  64 if tiny else 1024, None),
                 ("tinyllama-1.1b", tinyllama_config(tiny), (1, 2) if tiny else (4,),
                  64 if tiny else 1024, None)]  # fmt: skip
    runs = [(plan, mode) for plan in plans for mode in ("fp32", "tf32")]
    for done, ((name, cfg, batches, seq, trace_b), mode) in enumerate(runs):
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        try:
            model = build_causal_lm(env, cfg, torch.float32).train()
            n_params = sum(p.numel() for p in model.parameters())
            result["models"].setdefault(name, {"params": n_params, "config": cfg.to_dict()})
            pts = train_points(env, name, model, cfg, mode, batches, seq)
            remaining = T0 + args.budget_s - time.perf_counter()
            run_round_robin(env, pts, args.rounds, 2, args.steps,
                            time.perf_counter() + remaining / (len(runs) - done) * 0.7)  # fmt: skip
            if mode == "fp32" and trace_b is not None:
                traced = next(p for p in pts if p.key["batch"] == trace_b)
                result["traces"].append(
                    trace_point(env, traced, out_dir, f"trace-{name}-train-fp32", True)
                )
                traced = None
            result["records"] += [p.record() for p in pts]
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
        del model, pts
        env.fresh_memory()


def summary_table(records: list[dict]) -> str:
    head = ("| workload | runtime | phase | policy | batch | seq | median ms | p10 ms | p90 ms | "
            "round medians ms | wall ms | peak alloc GB | status |\n|---|---|---|---|---:|---:|"
            "---:|---:|---:|---|---:|---:|---|\n")  # fmt: skip
    rows = []
    for r in records:
        st = r.get("step_s")
        if st:
            ms = f"{st['median'] * 1e3:.2f} | {st['p10'] * 1e3:.2f} | {st['p90'] * 1e3:.2f} | " + \
                 ", ".join(f"{x * 1e3:.1f}" for x in r["round_medians_s"]) + \
                 f" | {r['wall_per_step_s'] * 1e3:.2f}"  # fmt: skip
        else:
            ms = "- | - | - | - | -"
        pa = r.get("peak_allocated_bytes")
        rt = r["runtime"] + (f" ({r['experts']} experts)" if r.get("experts") else "")
        rows.append(f"| {r['workload']} | {rt} | {r['phase']} | {r.get('policy') or ''} | "
                    f"{r['batch']} | {r['seq']} | {ms} | {pa / 1e9 if pa else 0:.2f} | "
                    f"{r['status']}{' (traced)' if r.get('traced') else ''} |")  # fmt: skip
    return head + "\n".join(rows) + "\n"


def measure_host(tiny: bool, path: Path, window_s: float) -> dict:
    """The host profile, written to ``path``: on CUDA by `gpumodel validate --host-only
    --host-window window_s` in a child process (this process stays clean of its profiler
    session); tiny (CPU) in process, with a window of at most 1 s."""
    if tiny:
        from gpumodel.validate.host import measure_host_profile, write_host_profile

        prof = measure_host_profile(device="cpu", repeats=3, calls=50, compile_step=False,
                                    window_s=min(window_s, 1.0))  # fmt: skip
        write_host_profile(prof, path)
        return prof
    import subprocess

    import yaml

    cmd = [sys.executable, "-m", "gpumodel", "validate", "--host-only", "--host-out", str(path),
           "--no-progress", "--host-window", str(window_s)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"host profile failed ({done.returncode}): {done.stderr[-500:]}")
    return yaml.safe_load(path.read_text())


PARTS = ("decode", "prefill", "static", "train", "fused", "arch", "padded", "families",
         "family-train", "moe", "moe-train", "train-fp32")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", default="decode,prefill",
                    help=",".join(PARTS))  # fmt: skip
    ap.add_argument("--out", required=True)
    ap.add_argument("--tag", default=None, help="file prefix (default: the parts)")
    ap.add_argument("--tiny", action="store_true", help="tiny configs on the CPU (smoke test)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--no-host", action="store_true")
    ap.add_argument("--static-grid", choices=("short", "wide", "graph2", "grid3", "grid4"), default="short",
                    help="hf-static-compiled points: short (4 decode, 1 prefill; shares a call "
                    "with the other parts), wide (6 decode, 4 prefill; a call of its own) or "
                    "graph2 (4 other decode points, one traced)")  # fmt: skip
    ap.add_argument("--fused-grid", type=int, choices=(1, 2), default=1,
                    help="the fused part's points: run 1's (traced at 8 x 2048) or the graph2 "
                    "call's (traced at 16 x 3072)")  # fmt: skip
    ap.add_argument("--families-grid", type=int, choices=(1, 2, 3), default=1,
                    help="the families part's points: run 1's, run 2's or run 3's")  # fmt: skip
    ap.add_argument("--fp32-grid", type=int, choices=(1, 2), default=1,
                    help="train-fp32's points: 1 (GPT-2, the 1.1B model at 2048) or 2 (Qwen3-0.6B, "
                         "the 1.1B model at 1024)")  # fmt: skip
    ap.add_argument("--moe-grid", type=int, choices=(1, 2, 3, 4), default=1,
                    help="the moe part's points: run 1's ... run 4's (moe-train: 1 to 4)")  # fmt: skip
    ap.add_argument("--moe-models", default=None,
                    help="the moe part's models to run (comma-separated; default: all)")  # fmt: skip
    ap.add_argument("--host-window", type=float, default=60.0,
                    help="seconds of the host profile's speed window (validate --host-window)")  # fmt: skip
    args = ap.parse_args()
    parts = {p.strip() for p in args.part.split(",") if p.strip()}
    bad = parts - set(PARTS)
    if bad or not parts:
        print(f"error: unknown part(s) {sorted(bad)}", file=sys.stderr)
        return 2
    if args.rounds < 3 or args.steps < 5:
        print("error: need --rounds >= 3 and --steps >= 5", file=sys.stderr)
        return 2
    tag = args.tag or "-".join(sorted(parts))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    import signal

    import torch

    # a `timeout` kill (SIGTERM) still writes what was measured (the finally below)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    env = Env(args.tiny)
    log(f"torch {torch.__version__} device {env.device}")
    result: dict = {"schema": SCHEMA, "tag": tag, "parts": sorted(parts), "tiny": args.tiny,
                    "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "env": env_info(env), "method": {"rounds": args.rounds, "timed_steps_per_round":
                    args.steps, "timer": "CUDA events around each step (perf_counter on CPU); "
                    "wall_per_step_s: perf_counter over the timed loop with a sync at its end / "
                    "steps", "interleaving": "each round runs every point of one model once: "
                    "fresh setup (empty_cache, reset_peak_memory_stats), warm-up, timed steps"},
                    "host_profile": None, "models": {}, "records": [], "traces": [],
                    "command": " ".join(sys.argv)}  # fmt: skip
    if not args.no_host:
        t0 = time.perf_counter()
        path = out_dir / f"host-{tag}.yaml"
        prof = measure_host(args.tiny, path, args.host_window)
        result["host_profile"] = path.name
        result["env"]["cpu_model"] = prof["cpu_model"]
        result["env"]["cuda_driver"] = prof["cuda_driver"]
        log(f"host profile in {time.perf_counter() - t0:.1f} s: decoder layer "
            f"{(prof['hf_decoder_layer_s'] or 0) * 1e6:.0f} us, launch "
            f"{prof['kernel_launch_s'] * 1e6:.1f} us -> {path.name}")  # fmt: skip
    try:
        if parts & {"decode", "prefill", "static"}:
            part_llama(env, parts, args, out_dir, result)
        if "train" in parts:
            part_train(env, args, out_dir, result)
        if "fused" in parts:
            part_fused(env, args, out_dir, result)
        if "arch" in parts:
            part_arch(env, args, out_dir, result)
        if "padded" in parts:
            part_padded(env, args, out_dir, result)
        if "families" in parts:
            part_families(env, args, out_dir, result)
        if "family-train" in parts:
            part_family_train(env, args, out_dir, result)
        if "moe" in parts:
            part_moe(env, args, out_dir, result)
        if "moe-train" in parts:
            part_moe_train(env, args, out_dir, result)
        if "train-fp32" in parts:
            part_train_fp32(env, args, out_dir, result)
    finally:
        result["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        result["seconds"] = round(time.perf_counter() - T0, 1)
        tmp = out_dir / f".{tag}.json.tmp"
        tmp.write_text(json.dumps(result, indent=1, default=str))
        os.replace(tmp, out_dir / f"steps-{tag}.json")
        table = summary_table(result["records"])
        (out_dir / f"summary-{tag}.md").write_text(table)
        print(table, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
