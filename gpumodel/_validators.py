"""The one validation boundary: constrained types every value entering the model is declared with.

Op fields, calibration parameters, spec fields, model presets, systems, batch rows, trace fields,
CLI options and library arguments all use these types (pydantic ``Annotated`` types) or the
``check_*`` functions built on the same bounds, so a value is accepted or refused the same way
wherever it comes in. The bounds are what can exist, not what is typical (docs/hardening.md):

* sizes are exact Python ints >= 1 (booleans refused, a float only when it is a whole number);
* one tensor holds at most 2**53 elements (the largest count a float64 holds exactly) and moves
  at most 2**60 bytes (1 EiB; the largest GPU memory today is ~0.3 TB);
* a job has at most 10**6 GPUs; a sequence at most 2**30 tokens (100x the longest context
  window published);
* floats are finite; rates, bandwidths and sizes > 0; overheads and times >= 0.

Errors raised by these validators are plain ``ValueError`` (what pydantic expects inside a
validator); the model boundaries (``Op``, spec, calibration loaders, the CLI) turn them into
``SpecError`` with the field named.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ValidationError, model_validator

from gpumodel.errors import SpecError

MAX_ELEMENTS = 2**53  # elements of one tensor: exact in float64
MAX_BYTES = 2**60  # bytes one op moves (1 EiB)
MAX_FLOPS = 1e30  # FLOPs of one op or step (10^30: a million GPUs for 30 years at 1 PFLOP/s)
MAX_GPUS = 10**6  # GPUs in one job
MAX_SECONDS = 1e9  # any time given as input (~31 years)
MAX_TOKENS = 1e18  # tokens to train on (10^18: ~10^5 times today's largest runs)
# tokens in one sequence: 100x the longest context window published (10M, Llama 4 Scout,
# ai.meta.com/blog/llama-4-multimodal-intelligence, 2025-04); 10^12 gave 5.7 x 10^13 s (fuzz)
MAX_SEQ_TOKENS = 2**30
MAX_DIGITS = 100  # digits of a number written as text (a 5000-digit number is refused early)


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if len(text) > MAX_DIGITS:
            raise ValueError(f"a number of {len(text)} characters is not a size (max {MAX_DIGITS})")
        if not text:
            raise ValueError("expected a number, got an empty string")
    return value


def _whole(value: Any) -> Any:
    """A float that is a whole number becomes an int (JSON and CSV write 4096.0); no rounding."""
    value = _no_bool(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"expected a whole number, got {value!r}")
        if not value.is_integer():
            raise ValueError(f"expected a whole number, got {value!r}")
        return int(value)
    return value


_NAMED = {
    MAX_ELEMENTS: "2**53",
    MAX_BYTES: "2**60 (1 EiB)",
    MAX_GPUS: "10**6",
    MAX_SEQ_TOKENS: "2**30 tokens",
}


def _shown(value: Any) -> str:
    if isinstance(value, int) and abs(value) >= 10**30:
        return f"a {int(abs(value).bit_length() * math.log10(2)) + 1}-digit number"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _bounds(gt: float | None = None, ge: float | None = None, le: float | None = None) -> Any:
    """One check with a readable message: finite, then the bounds (named where they have one)."""

    def check(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value!r}")
        if gt is not None and not value > gt:
            raise ValueError(f"must be greater than {gt:g}, got {_shown(value)}")
        if ge is not None and not value >= ge:
            raise ValueError(f"must be at least {ge:g}, got {_shown(value)}")
        if le is not None and not value <= le:
            raise ValueError(f"must be at most {_NAMED.get(le, f'{le:g}')}, got {_shown(value)}")
        return value

    return AfterValidator(check)


def _int_type(ge: int, le: int) -> Any:
    return Annotated[int, BeforeValidator(_whole), _bounds(ge=ge, le=le)]


def _float_type(**bounds: float) -> Any:
    return Annotated[float, BeforeValidator(_no_bool), _bounds(**bounds)]


FiniteFloat = _float_type()
PositiveFloat = _float_type(gt=0)
NonNegativeFloat = _float_type(ge=0)
# Efficiencies and fitted multipliers are at least 1e-4: a kernel at 0.01% of its roof is a
# broken fit, and 1e-300 turned a GEMM into 10^296 s (fuzz campaign, 2026-11-24)
MIN_RATIO = 1e-4
Efficiency = _float_type(ge=MIN_RATIO, le=1)  # a true fraction: achieved / possible
# achieved / datasheet: can pass 1 when the part boosts past its datasheet clock (the fitter caps
# its GEMM and stream efficiencies at 1.2)
DatasheetRatio = _float_type(ge=MIN_RATIO, le=1.5)
Fraction = _float_type(ge=0, le=1)
MAX_MULTIPLIER = 1e3
Multiplier = _float_type(ge=MIN_RATIO, le=MAX_MULTIPLIER)  # a fitted per-family multiplier
Cycles = _float_type(gt=0, le=1e9)  # a latency in clock cycles (DRAM ~600-900)
PerSMCycle = _float_type(ge=1e-6, le=1e6)  # elements one SM completes per clock
Percent = _float_type(ge=0, le=1e6)  # an error statistic, %
SignedPercent = _float_type(ge=-1e6, le=1e6)
Seconds = _float_type(ge=0, le=MAX_SECONDS)
PositiveSeconds = _float_type(gt=0, le=MAX_SECONDS)


def _whole_byte(value: float) -> float:
    """A byte count is 0 or at least one byte: 1e-300 B gave an infinite arithmetic intensity."""
    if 0 < value < 1:
        raise ValueError(f"a byte count is 0 or at least 1 byte, got {value:g}")
    return value


ByteCount = Annotated[float, BeforeValidator(_no_bool), _bounds(ge=0, le=MAX_BYTES),
                      AfterValidator(_whole_byte)]  # fmt: skip
PositiveBytes = _float_type(ge=1, le=MAX_BYTES)
FlopCount = _float_type(ge=0, le=MAX_FLOPS)
Rate = _float_type(gt=0, le=1e21)  # FLOP/s or bytes/s: a zetta-rate is far past any machine
MAX_USD_PER_GPU_HOUR = 1e6  # a price per GPU-hour past this is a typo, not a quote
UsdPerGpuHour = _float_type(gt=0, le=MAX_USD_PER_GPU_HOUR)

# a host-side cost given as an option or fitted from a trace (host_per_kernel_s): an hour is
# absurd
HostSecondsOrZero = _float_type(ge=0, le=3600)
# a host profile's figures (gpumodel.hostprofile): one eager call, one HF layer or one graph
# launch at most 0.1 s, ~10,000x the slowest measured call of its kind (an HF Mixtral layer
# 1.6 ms, an SDPA backward probe 0.11 ms): past it a profile is a typo or a broken measurement,
# and priced it would give a step of hours; a step-level figure (the model's own work per step,
# a cuDNN graph build) at most 10 s
MAX_HOST_CALL_S = 0.1
MAX_HOST_STEP_S = 10.0
HostCallSeconds = _float_type(gt=0, le=MAX_HOST_CALL_S)
HostCallSecondsOrZero = _float_type(ge=0, le=MAX_HOST_CALL_S)
HostStepSecondsOrZero = _float_type(ge=0, le=MAX_HOST_STEP_S)

Size = _int_type(1, MAX_ELEMENTS)  # a dimension or element count
NonNegativeSize = _int_type(0, MAX_ELEMENTS)
GpuCount = _int_type(1, MAX_GPUS)
SeqTokens = _int_type(1, MAX_SEQ_TOKENS)  # a sequence or context length in tokens
SmallCount = _int_type(1, 2**31 - 1)  # threads per block, registers, channels, layers, heads...


def _non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


NonEmptyStr = Annotated[str, AfterValidator(_non_empty)]


def _printable_name(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    if len(value) > 200 or not value.isprintable():
        raise ValueError("must be printable text of at most 200 characters (no control "
                         "characters: it is printed in every prediction that uses it)")  # fmt: skip
    return value


# a name that every prediction prints (a host profile's): no escape sequences for a terminal
PrintableName = Annotated[str, AfterValidator(_printable_name)]


class _CheckedMeta(type(BaseModel)):  # type: ignore[misc]
    """Turns the ValidationError of ``Model(...)`` into the model's GpumodelError. Only the
    direct call is wrapped: ``model_validate`` and nested models validate as usual (no custom
    ``__init__``, which would route all of pydantic's validation through Python)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as exc:
            from gpumodel.specs import format_validation_error

            name = getattr(cls, "op_name", None)
            where = f"op {name}" if isinstance(name, str) else cls.__name__
            raise cls._error(format_validation_error(exc, where)) from None


class Checked(BaseModel, metaclass=_CheckedMeta):
    """Base of the frozen data models users may build by hand (ops, specs, calibrations, model
    presets, systems): a bad field is a GpumodelError naming it (``_error``, SpecError by
    default), the same as when the model is read from a file."""

    _error: ClassVar[type[Exception]] = SpecError

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        """``true`` where a number or text is declared is an error: pydantic's lax mode reads
        it as 1 (``bus_width_bits: true`` was a 1-bit bus). Fields that allow bool keep it."""
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                key = field.alias if field.alias and field.alias in data else name
                if key in data and _has_bool(data[key]) and not _allows_bool(field.annotation):
                    raise ValueError(f"{key}: expected a number or text, got a boolean")
        return data


def _has_bool(value: Any, depth: int = 0) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, (list, tuple)) and depth < 2:
        return any(_has_bool(v, depth + 1) for v in value[:64])
    return False


_BOOL_OK: dict[Any, bool] = {}


def _allows_bool(annotation: Any) -> bool:
    """Whether a field's type admits a bool anywhere (bool, Any, an untyped container)."""
    try:
        return _BOOL_OK[annotation]
    except (KeyError, TypeError):
        pass
    from typing import get_args

    if annotation is bool or annotation is Any or annotation is object:
        ok = True
    else:
        args = get_args(annotation)
        ok = any(
            _allows_bool(a) for a in args if a is not Ellipsis and not isinstance(a, (int, str))
        )
        if not args and annotation in (list, tuple, dict):
            ok = True
    try:
        _BOOL_OK[annotation] = ok
    except TypeError:
        pass
    return ok


# ---------------------------------------------------------------------------------------------
# the same bounds for plain library arguments (functions that take numbers, not models)


def check_number(
    value: Any,
    name: str,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
) -> float:
    """``value`` as a finite float within the bounds, else a SpecError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            import numpy as np

            if isinstance(value, np.generic) and np.issubdtype(type(value), np.number):
                value = value.item()
            else:
                raise TypeError
        except (ImportError, TypeError):
            raise SpecError(f"{name} must be a number, got {_show(value)}") from None
    if isinstance(value, int) and abs(value) > 10**MAX_DIGITS:
        raise SpecError(f"{name} is too large ({_shown(value)})")
    number = float(value)
    low_ok = (gt is None or number > gt) and (ge is None or number >= ge)
    if math.isfinite(number) and low_ok and (le is None or number <= le):
        return number
    low = f"({gt:g}" if gt is not None else f"[{ge:g}" if ge is not None else None
    if low is not None and le is not None and le in _NAMED:  # a size: the upper bound is far
        first = f"greater than {gt:g}" if gt is not None else f"at least {ge:g}"
        bound = f"{first} and at most {_NAMED[le]}"  # type: ignore[index]
    elif low is not None and le is not None:
        bound = f"within {low}, {le:g}]"
    elif le is not None:
        bound = f"at most {_NAMED.get(le, f'{le:g}')}"  # type: ignore[call-overload]
    else:
        bound = (
            f"greater than {gt:g}"
            if gt is not None
            else f"at least {ge:g}"
            if ge is not None
            else ""
        )
    finite = "" if math.isfinite(number) else "a finite number "
    raise SpecError(f"{name} must be {finite}{bound}".rstrip() + f", got {_shown(value)}")


def number_from_text(text: Any, name: str) -> float:
    """A number written as text (a CLI list item, a CSV cell): ASCII only (Python's float()
    reads '४०९६' as 4096), at most MAX_DIGITS characters, finite. Else SpecError."""
    if not isinstance(text, str):
        return check_number(text, name)
    item = text.strip()
    if not item or len(item) > MAX_DIGITS or not item.isascii():
        raise SpecError(f"{name}: {_show(text)} is not a number (ASCII digits, at most "
                        f"{MAX_DIGITS} characters)")  # fmt: skip
    try:
        number = float(item)
    except ValueError:
        raise SpecError(f"{name}: {_show(text)} is not a number") from None
    return check_number(number, name)


def check_int(value: Any, name: str, *, ge: int = 1, le: int = MAX_ELEMENTS) -> int:
    """``value`` as an exact int within [ge, le] (a whole float is accepted), else SpecError."""
    if isinstance(value, bool):
        raise SpecError(f"{name} must be a whole number, got {value!r}")
    if not isinstance(value, int):
        number = check_number(value, name)
        if not number.is_integer():
            raise SpecError(f"{name} must be a whole number, got {value!r}")
        value = int(number)
    if not ge <= value <= le:
        raise SpecError(f"{name} must be within [{ge}, {_NAMED.get(le, le)}], got {_shown(value)}")
    return value


def check_name(value: Any, what: str = "name") -> str:
    """A name or path given as text: a str (or os.PathLike), not empty, no NUL byte, no part
    longer than a file name can be (255 bytes). Else SpecError, never the AttributeError /
    OSError a lookup would raise on it."""
    import os

    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise SpecError(f"{what} must be a name (text), got {_show(value)}")
    if not value.strip():
        raise SpecError(f"{what} must not be empty")
    if "\x00" in value or any(len(part.encode("utf-8", "replace")) > 255
                                for part in value.split("/")):  # fmt: skip
        raise SpecError(f"{what} is not a usable name: {_show(value)}")
    return value


def check_paths(value: Any, what: str = "search paths") -> tuple[str, ...]:
    """Extra search directories or files: one path, or an iterable of them (a str is one path,
    not its characters). Each passes :func:`check_name`."""
    import os

    if isinstance(value, (str, os.PathLike)):
        value = [value]
    elif value is None or isinstance(value, (dict, bytes)) or not hasattr(value, "__iter__"):
        raise SpecError(f"{what} must be a path or a list of paths, got {_show(value)}")
    return tuple(check_name(v, what) for v in value)


GPU_ARGS = {"gpus", "tp", "pp", "dp", "ep", "nodes", "gpus_per_node"}
SEQ_ARGS = {"seq", "context", "kv_seq"}  # token counts of one sequence
DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")


def check_counts(**values: Any) -> None:
    """Each given count (None: not given) an exact int >= 1; GPU counts (gpus, tp, pp, dp...)
    at most 10**6, sequence lengths (seq, context) at most 2**30 tokens, other sizes (batch,
    tokens per step...) at most 2**53."""
    for name, value in values.items():
        if value is not None:
            base = name.split("[")[0]
            high = MAX_GPUS if base in GPU_ARGS else MAX_ELEMENTS
            check_int(value, name, ge=1, le=MAX_SEQ_TOKENS if base in SEQ_ARGS else high)


def check_dtype(dtype: Any, name: str = "dtype") -> str:
    """One of the dtypes gpumodel knows; '' or a typo is an error, never a silent default."""
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise SpecError(f"{name} must be one of {', '.join(DTYPES)}; got {_show(dtype)}")
    return dtype


def check_bool(value: Any, name: str) -> bool:
    """A flag: True or False (numpy's too); '', 0, {} or a string is an error, not its truthiness."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise SpecError(f"{name} must be True or False, got {_show(value)}")


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise SpecError(f"{name} must be one of {', '.join(choices)}; got {_show(value)}")
    return value


def check_array(values: Any, name: str, *, whole: bool = True, ge: float = 1,
                le: float = MAX_ELEMENTS) -> Any:  # fmt: skip
    """A numpy float array of ``values``, every element finite within [ge, le] (and whole when
    ``whole``): the vectorised paths check their inputs as the scalar ones do."""
    import numpy as np

    if isinstance(values, (str, bytes, bool)) or (
        isinstance(values, (list, tuple)) and any(isinstance(v, (str, bytes, bool)) for v in values)
    ):  # numpy would read '١٢' as 12.0 and True as 1.0: numbers only, as the scalar checks
        raise SpecError(f"{name} must be numbers, got {_show(values)}")
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise SpecError(f"{name} must be numbers, got {_show(values)}") from None
    if arr.size == 0:
        raise SpecError(f"{name}: give at least one value")
    bad = ~np.isfinite(arr) | (arr < ge) | (arr > le)
    if whole:
        bad |= np.isfinite(arr) & (arr != np.floor(arr))
    if np.any(bad):
        first = arr[bad].flat[0]
        kind = "whole numbers" if whole else "numbers"
        raise SpecError(f"{name} must be {kind} within [{ge:g}, {_NAMED.get(le, f'{le:g}')}]; "  # type: ignore[call-overload]
                        f"got {float(first):g} ({int(bad.sum())} such value(s))")  # fmt: skip
    return arr


# Named arguments of the LLM planners (predict_inference, predict_training_step, memory, plan_*,
# search_training): each name's constraint, declared once. Enums come from the Literal types
# the functions are annotated with (gpumodel.llm.layers / .memory).
_NUMBER_ARGS: dict[str, dict[str, float]] = {
    "host_per_kernel_s": {"ge": 0, "le": 3600},  # a host cost per kernel: an hour is absurd
    "host_per_step_s": {"ge": 0, "le": 3600},
    "graph_launch_s": {"ge": 0, "le": 3600},
    "stream_floor_s": {"ge": 0, "le": 3600},
    "ttft_slo_s": {"gt": 0, "le": MAX_SECONDS},
    "tpot_slo_s": {"gt": 0, "le": MAX_SECONDS},
    "latency_slo_s": {"gt": 0, "le": MAX_SECONDS},
    "fragmentation": {"ge": 1, "le": 100},  # reserved / allocated
    "mfu": {"gt": 0, "le": 1},
    "days": {"gt": 0, "le": 1e6},
    "budget": {"gt": 0, "le": 1e15},
    "overhead_bytes": {"ge": 0, "le": MAX_BYTES},
    "tokens": {"gt": 0, "le": MAX_TOKENS},
}
_INT_ARGS = {"zero": (0, 3), "limit": (1, 2**31)}
# arguments whose default is a value: None given for them was a mistake, not "not given"
_NEVER_NONE = frozenset({"zero", "recompute", "attention", "dtype"})


def _llm_choices() -> dict[str, tuple[str, ...]]:
    import importlib
    from typing import get_args

    layers = importlib.import_module("gpumodel.llm.layers")
    memory = importlib.import_module("gpumodel.llm.memory")  # the module, not llm.memory()

    return {
        "attention": get_args(layers.AttentionImpl),
        "fusion": get_args(layers.Fusion),
        "kv_cache": get_args(layers.KVCache),
        "gqa": get_args(layers.GQA),
        "recompute": get_args(memory.Recompute),
        "policy": get_args(memory.Policy),
        "activation_model": get_args(memory.ActivationModel),
    }


def check_args(**values: Any) -> None:
    """Check the named arguments of an LLM planner (None: not given) against their declared
    constraint: counts (batch, seq, tp...) as :func:`check_counts`, enums (attention, fusion,
    kv_cache, gqa, recompute, policy), times, fractions and ``op_times`` (name -> seconds)."""
    choices = None
    for name, value in values.items():
        if value is None:
            if name in _NEVER_NONE:  # these have a default, not an "unset"
                raise SpecError(f"{name} must be given (leave it out for the default), got None")
            continue
        if name in _NUMBER_ARGS:
            bounds = _NUMBER_ARGS[name]
            number = check_number(value, name)
            if "ge" in bounds and not number >= bounds["ge"]:
                raise SpecError(f"{name} must be >= {bounds['ge']:g}, got {number:g}")
            if "gt" in bounds and not number > bounds["gt"]:
                raise SpecError(f"{name} must be > {bounds['gt']:g}, got {number:g}")
            check_number(number, name, le=bounds["le"])
        elif name in _INT_ARGS:
            low, high = _INT_ARGS[name]
            check_int(value, name, ge=low, le=high)
        elif name == "op_times":
            from collections.abc import Mapping

            if not isinstance(value, Mapping):
                raise SpecError(f"op_times must map op names to seconds, got {_show(value)}")
            for key, seconds in value.items():
                check_name(key, "op_times key")
                check_number(seconds, f"op_times[{key!r}]", ge=0, le=MAX_SECONDS)
        elif name == "dtype":
            check_dtype(value)
        else:
            choices = choices or _llm_choices()
            if name in choices:
                check_choice(value, name, choices[name])
            else:
                check_counts(**{name: value})


def _show(value: Any) -> str:
    """A short repr for a message; never fails (a 5000-digit int has no repr under Python's
    int-to-str limit, a container may hold one)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return _shown(value)
    try:
        text = repr(value)
    except ValueError:
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = [
    "MAX_BYTES",
    "MAX_ELEMENTS",
    "MAX_FLOPS",
    "MAX_GPUS",
    "ByteCount",
    "Checked",
    "Cycles",
    "DatasheetRatio",
    "Efficiency",
    "FiniteFloat",
    "FlopCount",
    "Fraction",
    "GpuCount",
    "HostCallSeconds",
    "HostCallSecondsOrZero",
    "HostSecondsOrZero",
    "HostStepSecondsOrZero",
    "Multiplier",
    "NonEmptyStr",
    "NonNegativeFloat",
    "NonNegativeSize",
    "PerSMCycle",
    "Percent",
    "PositiveBytes",
    "PositiveFloat",
    "PositiveSeconds",
    "Rate",
    "Seconds",
    "SignedPercent",
    "Size",
    "SmallCount",
    "check_args",
    "check_array",
    "check_bool",
    "check_choice",
    "check_counts",
    "check_dtype",
    "check_int",
    "check_name",
    "check_number",
    "check_paths",
    "number_from_text",
]
