"""Which spec a profiled device is: match the CUDA device name against spec names and aliases.

CUDA names a device loosely ("NVIDIA H100 80GB HBM3" is the SXM5 part, "NVIDIA H100 PCIe" the
PCIe card, "NVIDIA A100-SXM4-80GB"), so the match is by tokens: the family token (``h100``)
must agree, then variant tokens (``pcie``, ``nvl``, ``sxm4``, ``80gb``), the SM count and the
memory size decide between the parts of that family. The family is the id's model number
(``rtx-4090``: ``4090``, so an RTX 3090 or an RTX A6000 is no RTX 4090), and a form factor the
device names must be the spec's (an H200 NVL or a V100 PCIe is not the SXM part: no spec).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from gpumodel.specs import GPUSpec, list_gpus

_NOISE = {"nvidia", "tesla", "geforce", "quadro", "gpu", "tensor", "core"}
_FORM_FACTORS = ("pcie", "nvl", "sxm", "sxm2", "sxm4", "sxm5", "hgx")


def _tokens(text: str) -> set[str]:
    return {t for t in re.findall(r"[a-z0-9]+", text.lower()) if t not in _NOISE}


def gpu_from_device_name(
    name: str,
    sm_count: int | None = None,
    memory_bytes: float | None = None,
    specs_dirs: Iterable[str | Path] = (),
) -> GPUSpec | None:
    """The spec of the device CUDA calls ``name`` (``deviceProperties.name`` in a torch trace),
    or None when no spec of that family exists. ``sm_count`` and ``memory_bytes`` (``numSms``,
    ``totalGlobalMem``) break ties between parts of one family."""
    dev = _tokens(name)
    if not dev:
        return None
    best: tuple[float, GPUSpec] | None = None
    for spec in list_gpus(specs_dirs):
        family = _family(spec.id)
        if family not in dev:
            continue
        words = _tokens(" ".join((spec.id, spec.name, spec.memory.type, *spec.aliases)))
        if any(_form_factor(t) and not any(_form_factor(w) == _form_factor(t) for w in words)
               for t in dev):  # fmt: skip
            continue  # the device is a form factor this spec is not
        words -= {family}
        score = 10.0 + 3.0 * len(words & dev)
        if any(ff in words and not any(t.startswith(ff) for t in dev) for ff in _FORM_FACTORS):
            score -= 2.0  # the spec is a form factor the device name does not mention
        if sm_count is not None:
            score += 3.0 if spec.sm_count == sm_count else -3.0
        if memory_bytes:
            ratio = memory_bytes / spec.memory_bytes
            score += 2.0 if 0.85 <= ratio <= 1.1 else -2.0
        if best is None or score > best[0]:
            best = (score, spec)
    return best[1] if best else None


def _family(spec_id: str) -> str:
    """The model number of a spec id: its first token with a digit (``a100-sxm4-80gb``:
    ``a100``, ``rtx-4090``: ``4090``)."""
    parts = spec_id.split("-")
    return next((p for p in parts if any(c.isdigit() for c in p)), parts[0])


def _form_factor(token: str) -> str | None:
    """``pcie``, ``nvl`` or ``sxm`` for a form-factor token (``sxm4`` is ``sxm``), else None."""
    for ff in ("pcie", "nvl", "sxm"):
        if token.startswith(ff):
            return ff
    return None


__all__ = ["gpu_from_device_name"]
