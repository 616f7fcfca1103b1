"""``gpumodel calibrations``: which calibrations predictions find, for which GPU and system."""

from __future__ import annotations

import typer

from gpumodel.cli._app import app, print_json


@app.command("calibrations")
def calibrations(
    gpu: str = typer.Option(None, help="only this GPU (id or alias)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    as_csv: bool = typer.Option(False, "--csv", help="the table as CSV"),
) -> None:
    """List the calibrations found (user cache, then shipped) per GPU and system, with their
    provenance; 'default' marks the one a prediction uses with no --calibration."""
    import gpumodel as gm
    from gpumodel.calibration import cache_dir, find_calibrations
    from gpumodel.cli.tables import Table, show

    gpu_id = gm.get_gpu(gpu).id if gpu else None
    rows = find_calibrations(gpu_id)
    if as_json:
        print_json({"user_cache": str(cache_dir() / "calibrations"), "calibrations": rows})
        return
    heads = ["GPU", "system", "kind", "source", "measured", "default", "holds", "ref"]
    table = Table("calibrations found (user cache first, then shipped)", heads,
                  csv_header=[*heads[:-1], "path", "device", "versions"], csv_rows=[])  # fmt: skip
    for i, row in enumerate(rows, 1):
        holds = row["holds"]
        what = f"{len(holds)} " + ("collectives" if row["kind"] == "collectives" else "families")
        cells = [row["gpu"], row["system"], row["kind"], row["source"], row["created"],
                 "yes" if row["default"] else "shadowed", what]  # fmt: skip
        table.add(*cells, f"[{i}]")
        table.csv_rows.append([*cells, row["path"], row["device"], row["versions"]])
        table.notes.append(f"[{i}] {row['path']} - {row['device']}; {row['versions']}")
    if not rows:
        table.notes.append("none found: run `gpumodel validate` (and `--collectives` on several "
                           "GPUs)")  # fmt: skip
    show(table, as_csv)
