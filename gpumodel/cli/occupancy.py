"""``gpumodel occupancy`` and ``gpumodel littles-law``."""

from __future__ import annotations

from typing import Any

import typer

from gpumodel.cli._app import app, console, fail, print_json

_SPECS_DIR_HELP = "extra directory of GPU spec YAML files (repeatable)"


def _gpu(name: str, specs_dir: list[str]):
    from gpumodel.specs import get_gpu

    return get_gpu(name, specs_dir)


def _bytes(value: str, what: str) -> int:
    from gpumodel.units import parse_quantity

    number = parse_quantity(value, "bytes")
    if number != int(number):
        fail(f"{what} must be a whole number of bytes, got {value!r}")
    return int(number)


def _block_sizes(max_threads: int, warp: int, given: int) -> list[int]:
    """A warp, the multiples of 64 up to the per-block limit, and the size asked about."""
    sizes = {warp, given, *range(64, max_threads + 1, 64)}
    return sorted(s for s in sizes if 1 <= s <= max_threads)


def _fmt_limit(value: int | None) -> str:
    return "-" if value is None else str(value)


@app.command("occupancy")
def occupancy_command(
    gpu: str = typer.Option(..., "--gpu", help="GPU id or alias, e.g. h100"),
    threads: int = typer.Option(..., "--threads", help="threads per block"),
    regs: int = typer.Option(..., "--regs", help="registers per thread (ptxas -v, num_regs)"),
    smem: str = typer.Option(
        "0", "--smem", help="shared memory per block, static + dynamic: '48KiB', '49152'"
    ),
    carveout: int | None = typer.Option(
        None,
        "--carveout",
        help="preferred shared-memory carveout, percent 0..100 of the SM's maximum "
        "(cudaFuncAttributePreferredSharedMemoryCarveout); default: no preference",
    ),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
    as_csv: bool = typer.Option(False, "--csv", help="the block-size table as CSV"),
    plot: str | None = typer.Option(None, "--plot", help="write occupancy vs block size to FILE"),
    specs_dir: list[str] = typer.Option([], "--specs-dir", help=_SPECS_DIR_HELP),
) -> None:
    """Blocks and warps per SM, as cudaOccupancyMaxActiveBlocksPerMultiprocessor computes them."""
    from gpumodel.model.occupancy import occupancy, occupancy_table

    spec = _gpu(gpu, specs_dir)
    smem_bytes = _bytes(smem, "--smem")
    occ = occupancy(spec, threads, regs, smem_bytes, carveout)
    limits = spec.sm_limits
    if limits is None:  # occupancy() has already refused such specs
        fail(f"{spec.id} has no sm_limits")
    sizes = _block_sizes(limits.max_threads_per_block, limits.warp_size, threads)
    table = occupancy_table(spec, sizes, regs, smem_bytes, carveout)
    rows = [
        {
            "threads_per_block": int(t),
            "blocks_per_sm": int(b),
            "active_warps_per_sm": int(w),
            "occupancy": float(o),
            "limiters": list(lim),
        }
        for t, b, w, o, lim in zip(
            table["threads_per_block"],
            table["blocks_per_sm"],
            table["active_warps_per_sm"],
            table["occupancy"],
            table["limiters"],
            strict=True,
        )
    ]
    if plot:
        _plot_occupancy(spec, occ, regs, smem_bytes, carveout, plot)
    if as_json:
        print_json({**occ.model_dump(mode="json"), "gpu_name": spec.name, "table": rows})
        return
    if as_csv:
        from gpumodel.cli.tables import write_records

        write_records([{"gpu": spec.id, "registers_per_thread": regs,
                        "shared_mem_per_block_bytes": smem_bytes, **r,
                        "limiters": " ".join(r["limiters"])} for r in rows])  # fmt: skip
        return
    _print_occupancy(spec, occ, rows, plot)


def _print_occupancy(spec: Any, occ: Any, rows: list[dict[str, Any]], plot: str | None) -> None:
    from rich.table import Table

    from gpumodel.units import format_quantity

    out = console()
    carve = (
        "no carveout preference"
        if occ.carveout_percent is None
        else f"carveout {occ.carveout_percent}%"
    )
    out.print(
        f"{spec.name} ({spec.id}): {occ.threads_per_block} threads x "
        f"{occ.registers_per_thread} registers, "
        f"{format_quantity(occ.shared_mem_per_block_bytes, 'B', binary=True)} shared memory "
        f"per block, {carve}",
        highlight=False,
    )
    limiters = ", ".join(x.replace("_", " ") for x in occ.limiters)
    out.print(
        f"  blocks/SM {occ.blocks_per_sm}   warps/SM {occ.active_warps_per_sm} of "
        f"{occ.max_warps_per_sm}   occupancy {100 * occ.occupancy:.1f}%   limited by: {limiters}",
        highlight=False,
    )
    lim = occ.block_limits
    out.print(
        f"  blocks allowed by  warps {_fmt_limit(lim['warps'])}, registers "
        f"{_fmt_limit(lim['registers'])}, shared memory {_fmt_limit(lim['shared_memory'])}, "
        f"block slots {_fmt_limit(lim['blocks'])}",
        highlight=False,
    )
    out.print(
        f"  allocated per block: {occ.registers_per_block_allocated} registers "
        f"({occ.registers_per_warp_allocated} per warp), "
        f"{occ.shared_mem_per_block_allocated_bytes} B shared memory; SM shared-memory "
        f"configuration {occ.shared_memory_per_sm_bytes // 1024} KiB",
        highlight=False,
    )
    if occ.needs_opt_in:
        out.print(
            "  note: more than 48 KiB per block needs cudaFuncSetAttribute("
            "cudaFuncAttributeMaxDynamicSharedMemorySize)",
            highlight=False,
        )
    if occ.note:
        out.print(f"  note: {occ.note}", highlight=False)
    table = Table(title="occupancy vs block size (same registers and shared memory)")
    for col in ("threads/block", "blocks/SM", "warps/SM", "occupancy", "limited by"):
        table.add_column(col, justify="left" if col == "limited by" else "right")
    for row in rows:
        mark = " *" if row["threads_per_block"] == occ.threads_per_block else ""
        table.add_row(
            f"{row['threads_per_block']}{mark}",
            str(row["blocks_per_sm"]),
            str(row["active_warps_per_sm"]),
            f"{100 * row['occupancy']:.1f}%",
            ", ".join(x.replace("_", " ") for x in row["limiters"]),
        )
    out.print(table)
    if plot:
        out.print(f"plot written to {plot}", highlight=False)


def _plot_occupancy(
    spec: Any, occ: Any, regs: int, smem_bytes: int, carveout: int | None, path: str
) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("plotting needs matplotlib: pip install 'gpumodel[plot]'")
    from gpumodel.model.occupancy import occupancy_table

    limits = spec.sm_limits
    sizes = list(range(limits.warp_size, limits.max_threads_per_block + 1, limits.warp_size))
    table = occupancy_table(spec, sizes, regs, smem_bytes, carveout)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.step(sizes, 100 * table["occupancy"], where="mid", label="theoretical occupancy")
    label = f"{occ.threads_per_block} threads: {100 * occ.occupancy:.1f}%"
    ax.plot([occ.threads_per_block], [100 * occ.occupancy], "o", color="C3", label=label)
    ax.set_xlabel("threads per block")
    ax.set_ylabel("occupancy (% of max warps per SM)")
    ax.set_ylim(0, 105)
    ax.set_xlim(0, limits.max_threads_per_block + limits.warp_size)
    ax.set_title(
        f"{spec.name}: {regs} registers/thread, {smem_bytes} B shared memory/block", fontsize=10
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    fig.tight_layout()
    try:
        from gpumodel._io import save_figure

        save_figure(fig, path, dpi=120)
    except (OSError, ValueError) as exc:
        fail(f"cannot write plot {path}: {exc}")
    finally:
        plt.close(fig)


@app.command("littles-law")
def littles_law_command(
    gpu: str | None = typer.Option(None, "--gpu", help="GPU id or alias, e.g. h100"),
    latency_cycles: float | None = typer.Option(
        None,
        "--latency-cycles",
        help="DRAM latency in SM cycles (default: calibration, spec or published microbenchmarks)",
    ),
    bytes_per_thread: float = typer.Option(
        16, "--bytes-per-thread", help="bytes one load brings per thread (16 = float4)"
    ),
    ilp: int = typer.Option(1, "--ilp", help="independent loads in flight per thread"),
    throughput: float | None = typer.Option(
        None, "--throughput", help="plain Little's law: throughput (e.g. 8 ops/cycle)"
    ),
    latency: float | None = typer.Option(
        None, "--latency", help="plain Little's law: latency (e.g. 24 cycles)"
    ),
    calibration: str = typer.Option(
        None, help="'none', a calibration file, or a GPU id (default: the GPU's shipped one, "
        "whose measured DRAM latency it uses)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
    specs_dir: list[str] = typer.Option([], "--specs-dir", help=_SPECS_DIR_HELP),
) -> None:
    """Work in flight needed to saturate DRAM and the FP32 pipes (concurrency = rate x latency)."""
    from gpumodel.model.littles_law import concurrency, littles_law

    if (throughput is None) != (latency is None):
        fail("--throughput and --latency go together (concurrency = throughput x latency)")
    if gpu is None and throughput is None:
        fail("give --gpu, or --throughput and --latency")
    plain = None
    if throughput is not None and latency is not None:
        if throughput < 0 or latency < 0:
            fail("--throughput and --latency must be >= 0")
        plain = {
            "throughput": throughput,
            "latency": latency,
            "concurrency": littles_law(throughput, latency),
        }
    result = None
    if gpu is not None:
        from gpumodel.calibration import resolve

        spec = _gpu(gpu, specs_dir)
        result = concurrency(spec, latency_cycles, None, bytes_per_thread, ilp,
                             calibration=resolve(calibration, spec))  # fmt: skip
    if as_json:
        data: dict[str, Any] = result.model_dump(mode="json") if result else {}
        if plain:
            data["littles_law"] = plain
        print_json(data)
        return
    out = console()
    if result is not None:
        _print_concurrency(out, result)
    if plain:
        out.print(
            f"concurrency = {plain['throughput']:g} x {plain['latency']:g} = "
            f"{plain['concurrency']:g} in flight",
            highlight=False,
        )


def _source(source: str, reference: str | None) -> str:
    return f"{source}: {reference}" if reference else source


def _print_concurrency(out: Any, r: Any) -> None:
    from gpumodel.units import format_quantity

    lines = [
        f"{r.gpu_id}: DRAM {format_quantity(r.bandwidth_bytes_per_s, 'B/s')} x latency "
        f"{r.latency_dram_cycles:g} cycles ({r.latency_dram_s * 1e9:.0f} ns at "
        f"{r.clock_hz / 1e6:.0f} MHz; {_source(r.latency_source, r.latency_reference)})",
        f"  bytes in flight to saturate DRAM: {format_quantity(r.bytes_in_flight_needed, 'B')}"
        f" = {format_quantity(r.bytes_in_flight_per_sm, 'B', binary=True)} per SM",
        f"  one warp keeps {r.bytes_in_flight_per_warp:g} B in flight "
        f"({r.bytes_per_thread_in_flight:g} B/thread x ILP {r.ilp})",
    ]
    if r.max_warps_per_sm is not None:
        verdict = (
            "more than an SM can hold: raise bytes per thread or ILP"
            if r.exceeds_max_warps
            else f"{100 * r.warps_needed_per_sm / r.max_warps_per_sm:.0f}% occupancy"
        )
        lines.append(
            f"  warps needed per SM: {r.warps_needed_per_sm:.1f} of {r.max_warps_per_sm} "
            f"({verdict})"
        )
    else:
        lines.append(f"  warps needed per SM: {r.warps_needed_per_sm:.1f}")
    if r.arithmetic_ops_in_flight_per_sm is not None:
        lines.append(
            f"  arithmetic: {r.fp32_lanes_per_sm:.0f} FP32 lanes/SM x {r.fma_latency_cycles:g} "
            f"cycles FMA latency = {r.arithmetic_ops_in_flight_per_sm:.0f} FMAs in flight per SM"
            f" = {r.arithmetic_warps_needed_per_sm:.1f} warps at ILP {r.ilp} "
            f"({_source(r.fma_latency_source, r.fma_latency_reference)})"
        )
    for line in lines:
        out.print(line, highlight=False)
