"""``gpumodel calibrations``: which calibrations predictions find, for which GPU and system."""

from __future__ import annotations

import typer

from gpumodel.cli._app import app, console, print_json


@app.command("calibrations")
def calibrations(
    gpu: str = typer.Option(None, help="only this GPU (id or alias)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """List the calibrations found (user cache, then shipped) per GPU and system, with their
    provenance; 'default' marks the one a prediction uses with no --calibration."""
    import gpumodel as gm
    from gpumodel.calibration import cache_dir, find_calibrations

    gpu_id = gm.get_gpu(gpu).id if gpu else None
    rows = find_calibrations(gpu_id)
    if as_json:
        print_json({"user_cache": str(cache_dir() / "calibrations"), "calibrations": rows})
        return
    from rich.table import Table

    table = Table(title="calibrations found (user cache first, then shipped)")
    for head in ("GPU", "system", "kind", "source", "measured", "default", "holds", "ref"):
        table.add_column(head)
    for i, row in enumerate(rows, 1):
        holds = row["holds"]
        what = f"{len(holds)} " + ("collectives" if row["kind"] == "collectives" else "families")
        table.add_row(row["gpu"], row["system"], row["kind"], row["source"], row["created"],
                      "yes" if row["default"] else "shadowed", what, f"[{i}]")  # fmt: skip
    out = console()
    out.width = 100
    out.print(table)
    for i, row in enumerate(rows, 1):
        out.print(f"[{i}] {row['path']} - {row['device']}; {row['versions']}",
                  highlight=False, markup=False, soft_wrap=True)  # fmt: skip
    if not rows:
        out.print("none found: run `gpumodel validate` (and `--collectives` on several GPUs)",
                  highlight=False, markup=False)  # fmt: skip
