"""Read ops from JSONL, YAML or CSV files (an ``op`` field per row) for ``gpumodel batch``."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from gpumodel.errors import SpecError


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a batch file, in order. Format from the suffix: .jsonl/.json, .yaml/.yml, .csv."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror})") from None
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        rows = []
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise SpecError(f"{path}:{i}: not valid JSON ({exc.msg})") from None
    elif suffix == ".json":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    elif suffix in (".yaml", ".yml"):
        import yaml

        try:
            rows = yaml.safe_load(text)
        except yaml.YAMLError:
            raise SpecError(f"{path}: not valid YAML") from None
    elif suffix == ".csv":
        rows = [
            {k.strip(): _cell(v) for k, v in row.items() if k is not None}
            for row in csv.DictReader(text.splitlines())
        ]
    else:
        raise SpecError(
            f"{path}: unknown batch format '{suffix}'; use .jsonl, .json, .yaml or .csv"
        )
    if isinstance(rows, dict) and "ops" in rows:
        rows = rows["ops"]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise SpecError(f"{path}: expected a list of rows, each a mapping with an 'op' field")
    return rows


def _cell(value: str | None) -> Any:
    if value is None or value.strip() == "":
        return None
    v = value.strip()
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    try:
        number = float(v)
    except ValueError:
        return v
    return int(number) if number.is_integer() and not any(c in v for c in ".eE") else number
