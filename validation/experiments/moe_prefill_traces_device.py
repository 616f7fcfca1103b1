"""MoE prefill points the model priced 8-14% fast on H200 MoE runs 3-4 (Mixtral-8x7B 2 x 2048
and 3 x 2048, Qwen3-30B-A3B 4 x 2048), timed again on a fresh VM with one trace each: which
kernels take the time the model misses. A diagnostic for the model's next change, not a scored
set. Uses the unseen-steps harness (transformers' default grouped experts).

    python validation/experiments/moe_prefill_traces_device.py --out DIR
"""

from __future__ import annotations

from families_prefill_traces_device import su, traced_prefills_cli  # this folder (on sys.path)


def main() -> None:
    traced_prefills_cli(lambda tiny: [
        ("mixtral-8x7b", su.mixtral_8x7b_config(tiny), [(2, 2048), (3, 2048)], (2, 2048)),
        ("qwen3-30b-a3b", su.qwen3_30b_a3b_config(tiny), [(4, 2048), (4, 1024)], (4, 2048)),
    ], "moe-prefill", (2, 32), rounds=3, seconds=40)  # fmt: skip


if __name__ == "__main__":
    main()
