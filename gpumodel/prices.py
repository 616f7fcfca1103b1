"""GPU prices: one per GPU, each with its provider, date and source (the ``price:`` block of the
GPU's spec YAML), or a price the user gives for one run.

    price_for(get_gpu("h100"), None)                 # the spec's: CoreWeave, 2026-02-01, ...
    price_for(get_gpu("h100"), {"h100": 2.49})       # given on the command line
    parse_prices("h100=2.49,h200=3.10")              # {"h100": 2.49, "h200": 3.10}

Prices differ by provider, region, commitment and month: every cost output names the price it
used (``Price.label``) so that two GPUs priced by different providers or dates can be seen as
such. ``gpumodel prices`` lists the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gpumodel._validators import MAX_USD_PER_GPU_HOUR, _show, check_number
from gpumodel.errors import SpecError
from gpumodel.specs import GPUSpec

GIVEN = "given on the command line / in the call"


@dataclass(frozen=True)
class Price:
    """$ per GPU-hour and where it comes from."""

    usd_per_gpu_hour: float
    provider: str
    date: str
    source: str

    @property
    def label(self) -> str:
        """'Lambda 2025-06-01' or 'given'."""
        return "given" if self.provider == "given" else f"{self.provider} {self.date}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PriceArg = float | Mapping[str, float] | None




def _check(value: Any, what: str) -> float:
    """A $ per GPU-hour: finite, > 0, at most 10**6 (text from the command line is parsed)."""
    if isinstance(value, str):
        try:
            value = float(value) if value.isascii() and len(value) <= 100 else value
        except ValueError:
            raise SpecError(f"{what}: {value!r} is not a number") from None
    return check_number(value, f"{what} ($ per GPU-hour)", gt=0, le=MAX_USD_PER_GPU_HOUR)


def mixed_price_warning(prices: Mapping[str, Price | None]) -> list[str]:
    """GPU id -> price of side-by-side results: a one-line warning when the specs' prices come
    from different providers (an H100 at Lambda's 2025 catalog beside an H200 at CoreWeave's of
    2026: the $ columns then compare two catalogs as much as two GPUs)."""
    listed = {g: p for g, p in prices.items() if p is not None and p.provider != "given"}
    if len({p.provider for p in listed.values()}) < 2:
        return []
    which = ", ".join(f"{g} {p.label}" for g, p in listed.items())
    given = ",".join(f"{g}=..." for g in listed)
    return [f"prices from different providers ({which}): the $ columns compare their catalogs "
            f"as well as the GPUs; --price {given} prices them alike"]  # fmt: skip


def price_for(gpu: GPUSpec, price: PriceArg = None) -> Price | None:
    """The price of ``gpu``: ``price`` ($/GPU-hour for every GPU, or a mapping GPU id or alias
    -> $/GPU-hour), else the spec's; None when neither has one."""
    from gpumodel.specs import get_gpu

    gpu = get_gpu(gpu)
    given: float | None = None
    if isinstance(price, Mapping):
        for key in (gpu.id, *gpu.aliases):
            if key in price:
                given = _check(price[key], f"price of {key}")
                break
    elif price is not None:
        given = _check(price, "price")
    if given is not None:
        return Price(given, "given", "", GIVEN)
    if gpu.price is None:
        return None
    p = gpu.price
    return Price(p.usd_per_hour, p.provider, p.date.isoformat(), p.source)


def parse_prices(text: str) -> float | dict[str, float]:
    """``'2.49'`` -> 2.49 (every GPU); ``'h100=2.49,h200=3.10'`` -> per GPU (ids or aliases)."""
    if not isinstance(text, str):
        raise SpecError(f"prices must be text like '2.49' or 'h100=2.49', got {_show(text)}")
    text = text.strip()
    if "=" not in text:
        return _check(text, "--price")
    out: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise SpecError(f"--price: expected GPU=$/hour pairs like 'h100=2.49', got {part!r}")
        key = name.strip().lower()
        if key in out:  # the second would silently win
            raise SpecError(f"--price: {key} is priced twice; give each GPU one price")
        out[key] = _check(value.strip(), f"--price {name.strip()}")
    return out


def resolve_price_keys(price: PriceArg, used: Iterable[Any] | None = None) -> PriceArg:
    """A mapping's keys resolved to GPU ids (so ``h100`` prices ``h100-sxm``); unknown GPU
    names, two keys for one GPU, and (with ``used``, the GPUs a plan prices) a mapping that
    prices none of them are errors, not a silently unused price (``--price a100=2 --gpu h100``
    used the spec's H100 price). One list may price more GPUs than a command uses (a shared
    price list): the others keep their spec's price."""
    if not isinstance(price, Mapping):
        return price
    if not price:  # it would price no GPU, silently: the specs' prices would be used instead
        raise SpecError("price: an empty mapping prices no GPU; give $ per GPU-hour for every "
                        "GPU, or GPU -> $ per GPU-hour pairs like {'h100': 2.49}")  # fmt: skip
    from gpumodel.specs import get_gpu

    out: dict[str, Any] = {}
    for key, value in price.items():
        gpu_id = get_gpu(key).id
        if gpu_id in out:
            raise SpecError(f"price: {gpu_id} is priced twice (as {key} too); give one price")
        out[gpu_id] = value
    if used is not None:
        ids = [get_gpu(g).id for g in used]
        if not any(k in ids for k in out):
            raise SpecError(f"price: {', '.join(out)} prices none of the GPUs here "
                            f"({', '.join(ids)}): their specs' prices would be used")  # fmt: skip
    return out


def price_footnote(prices: Mapping[str, Price | None]) -> list[str]:
    """One line per GPU naming its price's provider, date and source."""
    lines = []
    for gpu, p in prices.items():
        if p is None:
            lines.append(f"{gpu}: no price (the spec has none; pass --price {gpu}=USD)")
        else:
            lines.append(f"{gpu}: ${p.usd_per_gpu_hour:.4g}/GPU-hour, {p.label}: {p.source}")
    return lines
