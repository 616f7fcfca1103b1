"""Multi-GPU commands: ``allreduce`` (any collective), ``amdahl``, ``dp-step``, ``systems``.

gpumodel allreduce --bytes 28GB --gpus 8 --gpu h100
gpumodel allreduce --bytes 28GB --gpus 16 --system dgx-h100
gpumodel amdahl --parallel-fraction 0.5,0.75,0.9,0.95,0.99 --gpus 1,2,4,8,16
gpumodel dp-step --compute-ms 300 --grad-bytes 28GB --gpus 1,2,4,8 --gpu h100 --plot dp.png
"""

from __future__ import annotations

import math
from typing import Any

import typer

import gpumodel as gm
from gpumodel.cli._app import app, console, fail, print_json, split_list
from gpumodel.model import comm
from gpumodel.model.amdahl import amdahl, amdahl_from_times, scaling_curve
from gpumodel.ops.collectives import collective_op
from gpumodel.systems import get_system, list_systems


def _bytes(text: str, what: str = "--bytes") -> float:
    try:
        value = gm.parse_quantity(text, "bytes")
    except gm.UnitError as exc:
        fail(f"{what}: {exc}")
    if value <= 0:
        fail(f"{what} must be positive, got {text!r}")
    return value


def _counts(text: str, what: str = "--gpus") -> list[int]:
    from gpumodel._validators import MAX_GPUS, check_int, number_from_text

    out = []
    for item in split_list(text):
        number = number_from_text(item, what)
        if number != int(number) or number < 1:
            fail(f"{what} must be whole numbers of at least 1, got {item!r}")
        out.append(check_int(int(number), what, le=MAX_GPUS))
    if not out:
        fail(f"{what} needs at least one GPU count, e.g. {what} 1,2,4,8")
    return out


def _system_arg(system: str | None, system_file: list[str]) -> str | None:
    """What to put in the op's ``system`` field: an id, or the file it was loaded from."""
    if system is None and not system_file:
        return None
    if system is None:
        if len(system_file) > 1:
            fail("several --system-file given: name one with --system ID")
        return system_file[0]
    spec = get_system(system, system_file)
    return spec.origin if system_file and spec.origin else spec.id


def _gpu_for(gpu: str | None, system: str | None) -> gm.GPUSpec:
    if gpu:
        return gm.get_gpu(gpu)
    if system:
        return gm.get_gpu(get_system(system).gpu)
    return gm.get_gpu("h100")


def _inf_to_none(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else value


@app.command("allreduce")
def allreduce_cmd(
    nbytes: str = typer.Option(..., "--bytes", help="size as nccl-tests reports it, e.g. 28GB"),
    gpus: int = typer.Option(..., "--gpus", help="GPUs (ranks) taking part"),
    gpu: str = typer.Option(None, help="GPU id or alias (default: the system's, else h100)"),
    collective: str = typer.Option(
        "all_reduce",
        help="all_reduce, all_gather, reduce_scatter, broadcast, all_to_all or send_recv",
    ),
    link: str = typer.Option("auto", help="auto, nvlink, pcie or network"),
    nodes: int = typer.Option(1, help="nodes the GPUs are spread over"),
    gpus_per_node: int = typer.Option(None, help="default: gpus / nodes (or the system's)"),
    system: str = typer.Option(None, help="system spec id (see `gpumodel systems`)"),
    system_file: list[str] = typer.Option([], help="your own system YAML (repeatable)"),
    algorithm: str = typer.Option("auto", help="auto (what NCCL would pick) or one algorithm"),
    link_bandwidth: str = typer.Option(
        None, help="what-if per-direction bandwidth of the in-node link, e.g. 32GB/s"
    ),
    channels: int = typer.Option(
        None, help="NCCL ring channels on the in-node link (default: NCCL's own count)"
    ),
    dtype: str = typer.Option("bf16", help="element type (reductions)"),
    in_graph: bool = typer.Option(
        False,
        "--in-graph",
        help="replayed from a CUDA graph (vLLM, torch.compile reduce-overhead): NCCL's own "
        "latency instead of a measured floor, which is an eager torch.distributed call each",
    ),
    calibration: str = typer.Option(None, help="'none', a file, or a GPU id (default: best)"),
    as_json: bool = typer.Option(False, "--json"),
    as_csv: bool = typer.Option(False, "--csv", help="the table as CSV"),
) -> None:
    """Time of a collective per algorithm (alpha-beta model), with algbw and busbw as
    nccl-tests reports them; marks the algorithm NCCL would pick and why."""
    _bytes(nbytes)
    sys_arg = _system_arg(system, system_file)
    spec = _gpu_for(gpu, sys_arg)
    op = collective_op(
        collective, bytes=nbytes, gpus=gpus, dtype=dtype, link=link, nodes=nodes,
        gpus_per_node=gpus_per_node, algorithm=algorithm, system=sys_arg,
        link_bandwidth=link_bandwidth, channels=channels, in_graph=in_graph,
    )  # fmt: skip
    pred = gm.predict(op, spec, calibration)
    d = pred.details
    if as_json:
        data = pred.to_dict()
        for row in data["details"].get("algorithms", []):
            for k in ("algbw_bytes_per_s", "busbw_bytes_per_s"):
                row[k] = _inf_to_none(row[k])
        data["details"]["algbw_bytes_per_s"] = _inf_to_none(d["algbw_bytes_per_s"])
        data["arithmetic_intensity"] = _inf_to_none(data["arithmetic_intensity"])
        print_json(data)
        return
    if as_csv:
        from gpumodel.cli.tables import write_records

        rows = d.get("algorithms") or [{"algorithm": "none", "time_s": pred.time_s}]
        write_records([{"collective": op.collective, "bytes": op.bytes, "gpus": op.gpus,
                        "gpu": pred.gpu, **r, "calibration": pred.calibration}
                       for r in rows])  # fmt: skip
        return
    _print_collective(pred, op)


def _print_collective(pred: gm.Prediction, op: Any) -> None:
    from rich.table import Table

    fq, ft = gm.format_quantity, gm.format_time
    d = pred.details
    out = console()
    say = lambda text: out.print(text, highlight=False, markup=False)  # noqa: E731
    if op.gpus == 1:
        say(f"{op.collective} of {fq(op.bytes, 'B')} on 1 x {pred.gpu}: 0 s. {d['why']}.")
        return
    topo = d["topology"]
    intra = topo["intra_node"]
    where = (f"{topo['nodes']} nodes x {topo['gpus_per_node']} GPUs" if topo["nodes"] > 1
             else f"one node, {intra['kind']} {fq(intra['per_direction_bytes_per_s'], 'B/s')} "
                  "per direction per GPU")  # fmt: skip
    title = f"{op.collective} of {fq(op.bytes, 'B')} on {op.gpus} x {pred.gpu} ({where})"
    chosen = [r["time_s"] for r in d["algorithms"] if r["chosen"]]
    caption = None
    if chosen and abs(chosen[0] - pred.time_s) > 1e-3 * pred.time_s:  # a measured line priced it
        caption = (f"the algorithms as the model prices them; the prediction "
                   f"({ft(pred.time_s)}) is the calibration's measured NCCL line")  # fmt: skip
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for col, just in (("algorithm", "left"), ("time", "right"), ("algbw", "right"),
                      ("busbw", "right"), ("steps", "right"), ("bound", "left"),
                      ("NCCL", "left"), ("cost", "left")):  # fmt: skip
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in d["algorithms"]:
        mark = " <- chosen" if r["chosen"] else ""
        table.add_row(
            r["algorithm"] + mark, ft(r["time_s"]), fq(r["algbw_bytes_per_s"], "B/s"),
            fq(r["busbw_bytes_per_s"], "B/s"), f"{r['steps']:g}", r["bound"],
            "yes" if r["nccl"] else "no", r["formula"],
        )  # fmt: skip
    out.print(table)
    say(f"prediction: {ft(pred.time_s)}, algbw {fq(d['algbw_bytes_per_s'], 'B/s')}, busbw "
        f"{fq(d['busbw_bytes_per_s'], 'B/s')} (bus factor {d['bus_factor']:.4g}), "
        f"{pred.bound}-bound; calibration: {pred.calibration}")  # fmt: skip
    say(f"chosen: {d['algorithm']}. {d['why']}")
    for t in pred.terms:
        say(f"  {t.pretty()}")
    plain = d["plain_transfer_s"]
    say(f"plain size/bandwidth: {fq(op.bytes, 'B')} / {d['plain_transfer_link']} = {ft(plain)}")
    if op.collective == "all_reduce":
        f = comm.bus_factor("all_reduce", op.gpus)
        say(f"a ring all-reduce sends 2(n-1)/n = {f:.4g}x that per GPU: >= {ft(plain * f)} at "
            "the datasheet rate")  # fmt: skip
        say(d["ring_factor"])
    for note in d.get("notes", []):
        say(f"note: {note}")
    for a in pred.advice:
        say(f"- {a}")


@app.command("amdahl")
def amdahl_cmd(
    parallel_fraction: str = typer.Option(
        None, help="p in [0, 1]; several give a table, e.g. 0.5,0.75,0.9,0.95,0.99"
    ),
    gpus: str = typer.Option("1,2,4,8,16", help="GPU counts"),
    serial_ms: float = typer.Option(None, help="measured serial time on one GPU, ms"),
    parallel_ms: float = typer.Option(None, help="measured parallelisable time on one GPU, ms"),
    as_json: bool = typer.Option(False, "--json"),
    as_csv: bool = typer.Option(False, "--csv", help="the table as CSV"),
) -> None:
    """Amdahl's law: speedup 1/((1-p)+p/n), efficiency speedup/n, limit 1/(1-p)."""
    counts = _counts(gpus)
    results = []
    if serial_ms is not None or parallel_ms is not None:
        if parallel_fraction is not None:
            fail("give --parallel-fraction or --serial-ms and --parallel-ms, not both")
        if serial_ms is None or parallel_ms is None:
            fail("give both --serial-ms and --parallel-ms")
        if serial_ms < 0 or parallel_ms < 0 or serial_ms + parallel_ms <= 0:
            fail("--serial-ms and --parallel-ms must not be negative, and not both zero")
        results.append(amdahl_from_times(serial_ms / 1e3, parallel_ms / 1e3, counts))
    elif parallel_fraction is None:
        fail("give --parallel-fraction P, or --serial-ms and --parallel-ms")
    else:
        for item in split_list(parallel_fraction):
            try:
                p = float(item)
            except ValueError:
                fail(f"--parallel-fraction: {item!r} is not a number")
            if not 0 <= p <= 1:
                fail(f"--parallel-fraction must be within [0, 1], got {item}")
            results.append(amdahl(p, counts))
    if as_json:
        rows = [{**r.model_dump(mode="json"), "limit": _inf_to_none(r.limit)} for r in results]
        print_json(rows[0] if len(rows) == 1 else rows)
        return
    if as_csv:
        from gpumodel.cli.tables import write_records

        write_records([{"parallel_fraction": r.parallel_fraction, "gpus": int(n), "speedup": s,
                        "efficiency": e, "limit": _inf_to_none(r.limit)}
                       for r in results for n, s, e in zip(r.gpus, r.speedup, r.efficiency)])  # fmt: skip
        return
    from rich.table import Table

    table = Table(title="Amdahl's law: speedup (efficiency)", title_justify="left")
    table.add_column("p")
    for n in counts:
        table.add_column(f"{n} GPU" + ("s" if n > 1 else ""), justify="right")
    table.add_column("limit 1/(1-p)", justify="right")
    for r in results:
        cells = [f"{s:.2f}x ({100 * e:.0f}%)" for s, e in zip(r.speedup, r.efficiency)]
        limit = "unbounded" if math.isinf(r.limit) else f"{r.limit:.3g}x"
        table.add_row(f"{r.parallel_fraction:.4g}", *cells, limit)
    out = console()
    out.print(table)
    r0 = results[0]
    if r0.time_s is not None:
        times = ", ".join(f"{int(n)}: {gm.format_time(t)}" for n, t in zip(r0.gpus, r0.time_s))
        out.print(f"from measured times: p = {r0.parallel_fraction:.4g}; time per GPU count "
                  f"{times}", highlight=False, markup=False)  # fmt: skip


@app.command("dp-step")
def dp_step_cmd(
    compute_ms: float = typer.Option(..., help="forward + backward on one GPU, ms"),
    grad_bytes: str = typer.Option(..., help="gradient bytes all-reduced per step, e.g. 28GB"),
    gpus: str = typer.Option("1,2,4,8", help="GPU counts"),
    gpu: str = typer.Option(None, help="GPU id or alias (default: the system's, else h100)"),
    bucket: str = typer.Option("25MB", help="DDP bucket size (bucket_cap_mb)"),
    first_bucket: str = typer.Option(None, help="smaller first bucket (DDP: 1MiB)"),
    backward_fraction: float = typer.Option(2 / 3, help="backward's share of compute"),
    scaling: str = typer.Option("weak", help="weak (per-GPU batch fixed) or strong"),
    link: str = typer.Option("auto", help="auto, nvlink, pcie or network"),
    system: str = typer.Option(None, help="system spec id"),
    system_file: list[str] = typer.Option([], help="your own system YAML (repeatable)"),
    calibration: str = typer.Option(None, help="'none', a file, or a GPU id (default: best)"),
    plot: str = typer.Option(None, help="write speedup/efficiency curves to FILE.png/.svg"),
    as_json: bool = typer.Option(False, "--json"),
    as_csv: bool = typer.Option(False, "--csv", help="the table as CSV"),
) -> None:
    """A data-parallel training step: compute, gradient all-reduce, and the step time with no
    overlap, DDP-style bucketed overlap and perfect overlap, against GPU count."""
    if compute_ms < 0 or not math.isfinite(compute_ms):
        fail(f"--compute-ms must be a finite number >= 0, got {compute_ms}")
    if not 0 <= backward_fraction <= 1:
        fail(f"--backward-fraction must be within [0, 1], got {backward_fraction}")
    if scaling not in ("weak", "strong"):
        fail(f"--scaling must be weak or strong, got {scaling!r}")
    if link not in ("auto", "nvlink", "pcie", "network"):
        fail(f"--link must be auto, nvlink, pcie or network, got {link!r}")
    grad = _bytes(grad_bytes, "--grad-bytes")
    bucket_b = _bytes(bucket, "--bucket")
    first_b = _bytes(first_bucket, "--first-bucket") if first_bucket else None
    counts = _counts(gpus)
    sys_arg = _system_arg(system, system_file)
    spec = _gpu_for(gpu, sys_arg)
    if plot:
        from gpumodel.cli.roofline import require_matplotlib

        require_matplotlib()  # fail before the work, with the install hint
    curve = scaling_curve(
        compute_ms / 1e3, grad, counts, spec, bucket_bytes=bucket_b,
        first_bucket_bytes=first_b, backward_fraction=backward_fraction,
        scaling=scaling, link=link, system=sys_arg, calibration=calibration,
    )  # fmt: skip
    if plot:
        _plot_dp(curve, plot, spec.id)
    if as_json:
        print_json({"gpu": spec.id, "scaling": curve.scaling, "grad_bytes": curve.grad_bytes,
                    "bucket_bytes": curve.bucket_bytes,
                    "single_gpu_step_s": curve.single_gpu_step_s, "points": curve.rows()})  # fmt: skip
        return
    if as_csv:
        from gpumodel.cli.tables import write_records

        write_records(curve.rows())
        return
    from rich.table import Table

    ft = gm.format_time
    table = Table(
        title=f"data-parallel step on {spec.id}: compute {ft(compute_ms / 1e3)}, gradients "
        f"{gm.format_quantity(grad, 'B')}, {curve.scaling} scaling, buckets of "
        f"{gm.format_quantity(bucket_b, 'B')}",
        title_justify="left",
    )
    for col in ("GPUs", "compute", "all-reduce", "no overlap", "bucketed (DDP)", "perfect",
                "speedup none / DDP / perfect", "efficiency DDP"):  # fmt: skip
        table.add_column(col, justify="right")
    for pt in curve.points:
        st = pt.step
        table.add_row(
            str(pt.gpus), ft(st.compute_s), ft(st.allreduce_s), ft(st.step_none_s),
            ft(st.step_bucketed_s), ft(st.step_perfect_s),
            f"{pt.speedup['none']:.2f} / {pt.speedup['bucketed']:.2f} / "
            f"{pt.speedup['perfect']:.2f}",
            f"{100 * pt.efficiency['bucketed']:.0f}%",
        )  # fmt: skip
    out = console()
    out.print(table)
    out.print(
        "no overlap = compute + all-reduce; perfect = forward + max(backward, all-reduce) "
        "(forward makes no gradients to send); bucketed = DDP: each bucket's all-reduce starts "
        "when backward has produced it and the previous bucket is done; the last is exposed.",
        highlight=False, markup=False,
    )  # fmt: skip
    if plot:
        out.print(f"wrote {plot}", highlight=False, markup=False)


def _plot_dp(curve: Any, path: str, gpu_id: str) -> None:
    from gpumodel.cli.roofline import require_matplotlib

    plt = require_matplotlib()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    n = [pt.gpus for pt in curve.points]
    for mode, style in (("none", "o-"), ("bucketed", "s-"), ("perfect", "^-")):
        ax1.plot(n, [pt.speedup[mode] for pt in curve.points], style, label=mode)
        ax2.plot(n, [100 * pt.efficiency[mode] for pt in curve.points], style, label=mode)
    ax1.plot(n, n, "k:", label="ideal")
    ax1.set_xlabel("GPUs")
    ax1.set_ylabel("speedup vs 1 GPU")
    ax2.set_xlabel("GPUs")
    ax2.set_ylabel("efficiency (%)")
    ax2.set_ylim(0, 105)
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"data-parallel scaling on {gpu_id} ({curve.scaling} scaling)")
    fig.tight_layout()
    from gpumodel._io import save_figure

    save_figure(fig, path)
    plt.close(fig)


@app.command("systems")
def systems_cmd(
    system_file: list[str] = typer.Option([], help="your own system YAML (repeatable)"),
    as_json: bool = typer.Option(False, "--json"),
    as_csv: bool = typer.Option(False, "--csv", help="the table as CSV"),
) -> None:
    """Multi-GPU system specs (nodes and their links) with their sources."""
    systems = list_systems(system_file)
    if as_json:
        print_json([s.model_dump(mode="json") for s in systems])
        return
    if as_csv:
        from gpumodel.cli.tables import write_records

        write_records([{
            "id": s.id, "gpu": s.gpu, "gpus_per_node": s.gpus_per_node,
            "intra_node_kind": s.intra_node.kind,
            "intra_node_bytes_per_s_both_directions":
                s.intra_node.bandwidth_both_directions_bytes_per_s,
            "network_kind": s.inter_node.kind if s.inter_node else None,
            "network_bytes_per_s_per_direction":
                s.inter_node.per_direction_bytes_per_s if s.inter_node else None,
        } for s in systems])  # fmt: skip
        return
    from rich.table import Table

    fq = gm.format_quantity
    table = Table(title="systems (in-node: per GPU, both directions; network: per GPU, one way)")
    for col in ("id", "GPU", "GPUs/node", "in node", "network"):
        table.add_column(col)
    for s in systems:
        net = s.inter_node
        table.add_row(
            s.id, s.gpu, str(s.gpus_per_node),
            f"{s.intra_node.kind} {fq(s.intra_node.bandwidth_both_directions_bytes_per_s, 'B/s')}",
            f"{net.kind} {fq(8 * net.per_direction_bytes_per_s, 'b/s')}" if net else "-",
        )  # fmt: skip
    console().print(table)
