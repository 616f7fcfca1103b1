"""``gpumodel specs list|show|check|schema``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import gpumodel as gm
from gpumodel.cli._app import app, console, print_json

specs_app = typer.Typer(
    help="The GPU spec library: list, show, check, schema.", no_args_is_help=True
)
app.add_typer(specs_app, name="specs")

SpecsDir = Annotated[list[str], typer.Option("--specs-dir", help="extra spec directory")]


@specs_app.command("list")
def specs_list(
    specs_dir: SpecsDir = [],
    as_json: bool = typer.Option(False, "--json"),
    as_csv: bool = typer.Option(False, "--csv", help="the table as CSV"),
) -> None:
    """All GPUs found on the spec search path, with each one's price, provider and date."""
    from rich.table import Table

    gpus = gm.list_gpus(specs_dir)
    if as_csv:
        from gpumodel.cli.tables import write_records

        write_records([{
            "id": g.id, "name": g.name, "aliases": ",".join(g.aliases), "sm_count": g.sm_count,
            "memory_bytes": g.memory_bytes,
            "memory_bandwidth_bytes_per_s": g.memory_bandwidth_bytes_per_s,
            "bf16_tensor_flops": g.peak_flops("bf16", "tensor"),
            "fp32_vector_flops": g.peak_flops("fp32", "vector"),
            "usd_per_gpu_hour": g.price.usd_per_hour if g.price else None,
            "price_provider": g.price.provider if g.price else None,
            "price_date": g.price.date.isoformat() if g.price else None,
            "price_source": g.price.source if g.price else None,
        } for g in gpus])  # fmt: skip
        return
    if as_json:
        print_json([{"id": g.id, "name": g.name, "aliases": g.aliases, "origin": g.origin}
                    for g in gpus])  # fmt: skip
        return
    fq = gm.format_quantity
    table = Table(title=f"{len(gpus)} GPUs")
    for col in ("id", "aliases", "name", "SMs", "memory", "bandwidth", "bf16 tensor", "fp32",
                "$/h"):  # fmt: skip
        table.add_column(col)
    for g in gpus:
        bf16 = g.peak_flops("bf16", "tensor")
        fp32 = g.peak_flops("fp32", "vector")
        table.add_row(
            g.id, ",".join(g.aliases), g.name, str(g.sm_count), fq(g.memory_bytes, "B"),
            fq(g.memory_bandwidth_bytes_per_s, "B/s"), fq(bf16, "FLOP/s") if bf16 else "-",
            fq(fp32, "FLOP/s") if fp32 else "-",
            f"{g.price.usd_per_hour:.2f}" if g.price else "-",
        )  # fmt: skip
    console().print(table)


@specs_app.command("show")
def specs_show(
    gpu: str, specs_dir: SpecsDir = [], as_json: bool = typer.Option(False, "--json"),
    as_file: bool = typer.Option(False, "--file", help="the spec file as written, with its "
                                 "sources: a start for your own (--file > mine.yaml)"),
) -> None:
    """One GPU's spec in SI units, and the file it came from."""
    spec = gm.get_gpu(gpu, specs_dir)
    if as_file:
        if not spec.origin or not Path(spec.origin).is_file():
            raise gm.SpecError(f"{spec.id} was not loaded from a file")
        typer.echo(Path(spec.origin).read_text(), nl=False)
        return
    data = spec.model_dump(mode="json")
    data["origin"] = spec.origin
    if as_json:
        print_json(data)
        return
    import yaml

    # plain stdout: YAML folds its own long strings validly, a console's wrapping would not
    # (`specs show h100 > my.yaml` is how a user starts a spec of their own)
    typer.echo(f"# from {spec.origin}")
    typer.echo(yaml.safe_dump(data, sort_keys=False, width=88), nl=False)


@specs_app.command("check")
def specs_check(files: list[str], as_json: bool = typer.Option(False, "--json")) -> None:
    """Validate spec files; warn when a tensor rate looks like a sparse figure."""
    from gpumodel.speccheck import check_spec

    checked = [(f, gm.load_spec_file(f)) for f in files]  # every file read before any output
    if as_json:
        print_json([{"file": f, "id": spec.id, "warnings": check_spec(spec)}
                    for f, spec in checked])  # fmt: skip
        return
    for f, spec in checked:
        warnings = check_spec(spec)
        status = "ok" if not warnings else f"{len(warnings)} warning(s)"
        console().print(f"{f}: {spec.id}: {status}", highlight=False, markup=False)
        for w in warnings:
            console().print(f"  warning: {w}", highlight=False, markup=False)


@specs_app.command("schema")
def specs_schema(
    as_json: bool = typer.Option(True, "--json", help="(the schema is JSON either way)"),
) -> None:
    """JSON Schema of a spec file, for editor validation."""
    from gpumodel.specs import spec_json_schema

    print_json(spec_json_schema())
