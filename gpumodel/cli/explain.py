"""``gpumodel explain gemm|attention|decode|allreduce``: formulas (sympy) and solved crossovers.

gpumodel explain decode --gpu h100 --model llama-3-8b
gpumodel explain allreduce --gpu h100 --gpus 8
"""

from __future__ import annotations

import typer

from gpumodel.cli._app import app, console, fail, print_json
from gpumodel.symbolic import TOPICS, explain_symbolic


@app.command()
def explain(
    topic: str = typer.Argument(..., help=f"one of: {', '.join(TOPICS)}"),
    gpu: str = typer.Option("h100", help="GPU id or alias"),
    model: str = typer.Option(None, help="take widths from a model preset (attention, decode)"),
    dtype: str = typer.Option("bf16", help="element type (sets the ridge point and bytes)"),
    gpus: int = typer.Option(8, help="ranks of the all-reduce"),
    context: int = typer.Option(0, help="decode: KV-cache length per sequence"),
    size: int = typer.Option(4096, help="gemm: matrix side; decode without --model: hidden"),
    calibration: str = typer.Option("none", help="all-reduce: 'none', a file, or a GPU id"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """FLOPs, bytes and arithmetic intensity as formulas, and the crossovers solved for a GPU."""
    if topic.lower().replace("-", "").replace("_", "") not in {t for t in TOPICS}:
        fail(f"unknown topic '{topic}'; choose from {', '.join(TOPICS)}")
    if context < 0 or size < 1 or gpus < 1:
        fail("--context must be >= 0, --size and --gpus >= 1")
    result = explain_symbolic(topic, gpu, model=model, dtype=dtype, gpus=gpus, context=context,
                              size=size, calibration=calibration)  # fmt: skip
    if as_json:
        print_json(result.to_dict())
        return
    console().print(result.explain(), highlight=False, markup=False, soft_wrap=True)
