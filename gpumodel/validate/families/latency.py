"""Load-to-use latency: a one-thread pointer chase over working sets from 16 KB to 1 GB. No op
to predict: its cycles per load are measured constants (DRAM and L2 latency) the fit starts
from.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gpumodel.validate.cupy_engine import BLOCK
from gpumodel.validate.cupy_engine import Context as _Context
from gpumodel.validate.cupy_engine import Dev as _Dev
from gpumodel.validate.cupy_engine import check as _check
from gpumodel.validate.families.base import Family, make_record
from gpumodel.validate.timing import log_sizes

if TYPE_CHECKING:
    pass


LATENCY_STRIDE_BYTES = 256  # > the 128-byte cache line: no two chase nodes share a line


def latency_sizes(quick: bool) -> list[int]:
    if quick:
        return [16 << 10, 256 << 10, 4 << 20, 32 << 20, 256 << 20, 1 << 30]
    extra = [24 << 20, 40 << 20, 48 << 20, 80 << 20, 96 << 20]
    return sorted(set(log_sizes(16 << 10, 1 << 30, 1)) | set(extra))


# --------------------------------------------------------------------------- measure


def _latency_point(ctx: _Context, ws: int, top: int) -> list[dict[str, Any]]:
    import numpy as np

    cp = ctx.cupy
    buf = ctx.slot("latency", top, lambda: cp.zeros(top // 8, dtype=cp.uint64))
    words = LATENCY_STRIDE_BYTES // 8
    nodes = ws // LATENCY_STRIDE_BYTES
    # one cycle through every node in random order: node order[i] points to order[i + 1]
    order = np.random.default_rng().permutation(nodes).astype(np.int64)
    order_d = cp.asarray(order)
    ctx.kernel("check.cu", "build_chain")(
        _Dev(ctx)._grid(nodes), (BLOCK,), (buf, order_d, np.int64(nodes), np.int64(words))
    )
    del order_d
    steps = 20_000 if ctx.quick else 100_000
    out = cp.zeros(3, dtype=cp.int64)
    kern = ctx.kernel("latency.cu", "pointer_chase")
    cycles, nss = [], []
    fits = ws <= 2 * ctx.l2_bytes
    at = 0  # position along the cycle; each run carries on where the last one stopped, so a
    # working set larger than L2 keeps meeting nodes the earlier runs did not leave in cache
    for i in range(4):
        # The first run also compiles and, for working sets near L2 size or below, walks every
        # node once so the timed steps find them in cache; later runs re-load L1 (per SM, not
        # kept across launches) with a short walk.
        if i == 0:
            warm = nodes if fits else min(nodes, 20_000)
        else:
            warm = min(nodes, 2048) if fits else 0
        start = np.uint64(order[at] * words)
        kern((1,), (1,), (buf, np.int64(warm), np.int64(steps), start, out))
        res = cp.asnumpy(out)
        at = (at + warm + steps) % nodes
        _check(int(res[2]) == int(order[at] * words), "pointer chase ended on the wrong node")
        if i:
            cycles.append(res[0] / steps)
            nss.append(res[1] / steps)
    from gpumodel.validate.timing import summarize

    ns, spread = summarize(nss)
    cyc = float(np.median(cycles))
    meta = {
        "working_set_bytes": ws,
        "ns_per_load": ns,
        "cycles_per_load": cyc,
        "cycles_per_load_from_clock_rate": (
            ns * ctx.sm_clock_khz * 1e-6 if ctx.sm_clock_khz else None
        ),
        "stride_bytes": LATENCY_STRIDE_BYTES,
        "steps": steps,
        "cycle_source": "clock64",
    }
    return [make_record("latency", None, ns * 1e-9, len(nss), spread, meta)]


# --------------------------------------------------------------------------- fit


def latency_parameters(records: Iterable[dict[str, Any]], l2_bytes: float) -> dict[str, float]:
    """DRAM and L2 load-to-use latency (cycles) from the pointer-chase records."""
    import numpy as np

    lat = [r for r in records if r.get("family") == "latency" and r.get("meta")]
    out: dict[str, float] = {}
    big = [r["meta"].get("cycles_per_load") for r in lat
           if r["meta"].get("working_set_bytes", 0) >= 8 * l2_bytes]  # fmt: skip
    mid = [r["meta"].get("cycles_per_load") for r in lat
           if 2e6 <= r["meta"].get("working_set_bytes", 0) <= l2_bytes / 4]  # fmt: skip
    big = [c for c in big if c]
    mid = [c for c in mid if c]
    if big:
        out["dram_latency_cycles"] = float(np.median(big))
    if mid:
        out["l2_latency_cycles"] = float(np.median(mid))
    return out


def _points(quick: bool) -> list[tuple[int, int]]:
    sizes = latency_sizes(quick)
    top = max(sizes)
    return [(s, top) for s in sizes]


LATENCY = Family(
    name="latency",
    engine="cupy",
    points=_points,
    label=lambda s, _top: f"latency {s} B",
    measure=_latency_point,
    constants=lambda records, gpu: latency_parameters(records, gpu.l2_cache_bytes),
)
