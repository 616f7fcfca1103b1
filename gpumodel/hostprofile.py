"""The host side of a whole step: what the CPU, Python, PyTorch and the CUDA driver cost per op,
per layer and per graph replay, measured on one machine and stored as a host profile.

A step of an eager PyTorch program is often decided by the host, not the GPU: HF eager decode
of Llama-3-8B (batch 8, context 2048) measured 21.9 ms on one H100 machine and 32.4 ms on
another (issue 17). A prediction of such a step is only as good as its knowledge of the host,
so every whole-step prediction names the profile it assumes (``host=``, ``--host``):

    gm.load_host("reference-h100")          # a shipped profile, by name
    gm.load_host("my-box.yaml")             # a file
    gm.load_host()                          # the measured local one if any, else the default

File format (``host_profile: 1``; written by ``gpumodel validate --host-only``; every time in
seconds, one number per field, the p10/p90 of the repeats under ``spread``; a call, a layer or a
launch at most 0.1 s, a step-level figure 10 s (``_validators.MAX_HOST_CALL_S``,
``MAX_HOST_STEP_S``), a key once):

    host_profile: 1
    name: str                      # how predictions refer to it
    measured_at: ISO 8601
    cpu_model: str                 # /proc/cpuinfo "model name"
    cpu_cores: int
    python: str
    torch: str
    transformers: str | null
    cuda_driver: str | null
    gpu: str                       # the GPU of the machine it was measured on
    eager_op_s: {matmul, elementwise, reduction, norm, view, cat, copy, index, sdpa,
                 optimizer_step, conv, scaled_mm, sdpa_forced, sdpa_mask, sdpa_backward}
                                   # host time of one eager aten call of that kind, back to
                                   # back (conv, scaled_mm, sdpa_*: optional, newer profiles;
                                   # scaled_mm: fp8 torch._scaled_mm, fp8 GPUs; sdpa_forced:
                                   # inside sdpa_kernel, sdpa_mask: a bool attn_mask,
                                   # sdpa_backward: autograd.grad of one call)
    probe_kernels: {sdpa, sdpa_forced, sdpa_mask, sdpa_backward} | null
                                   # kernels each SDPA probe launched per call
    kernel_launch_s: float         # a bare kernel launch (no framework)
    hf_decoder_layer_s: float | null       # one HF Llama decoder layer's eager forward (host)
    hf_decoder_layer_kernels: int | null   # kernels that forward launched
    hf_moe_layer_s: float | null   # host time per decoder layer inside a small HF Mixtral
                                   # model's decode forward (optional: older profiles lack it)
    hf_model_step_s: float | null  # an HF Llama model's own host time per decode step, beside
                                   # its layers (embedding, rotary tables, mask, lm head)
    hf_model_layer_s: float | null # host time per decoder layer inside that model's forward
    graph_replay_s: float          # cudaGraphLaunch of a captured graph, host side
    graph_replay_per_kernel_s: float       # GPU time per kernel inside a replayed graph
    compiled_step_launch_s: float  # host time of a torch.compile(mode="reduce-overhead") call
                                   # around its graph replay (guards, cudagraph trees)
    profiler_event_s: float | null # host time torch.profiler adds per cpu_op / runtime event
                                   # it records (CPU + CUDA activities, record_shapes=True)
    sdpa_graph_build_s: float | null  # host time of an attention call at shapes the process
                                   # has not run before, where SDPA runs cuDNN (torch builds
                                   # one cuDNN graph per shape: a decode step at a new KV
                                   # length pays it once)
    host_copy_s: {h2d_pinned, h2d_pageable, d2h_pinned, d2h_pageable} | null
                                   # wall clock of a 4 KB host<->device copy and its
                                   # synchronisation (pinned/pageable .to('cuda'),
                                   # pinned.copy_(dev), dev.cpu()): the fixed cost of a copy
                                   # on this host (newer profiles; ``gm.predict(host=)``)
    spread: {field: [p10, p90]}    # measured spread of the fields above
    host_drift: [p10, p90] | null  # the host's speed during the measurement as factors of
                                   # its median (the larger HF model's per-round forward
                                   # time): a host-bound step's range (``time_range_s``)
    notes: str | null              # optional: provenance in words

Profiles are looked up by name in the user cache (``$GPUMODEL_CACHE_DIR/hosts`` or
``~/.cache/gpumodel/hosts``, where ``gpumodel validate --host-only`` writes
``measured-<hostname>-<date>.yaml``) and then in the shipped ``specs/hosts/``. With no ``host``
the default is ``default_host()``: ``local.yaml`` in the cache if present, else the newest
cached profile measured on this machine's CPU model, else the shipped ``typical`` host (the
median of the host profiles measured on the project's H100 and H200 machines). Which host a
prediction assumes is always in its result (``host``), and ``mismatch()`` is the one-line
warning when the machine running differs from it.

Precedence of the eager host cost per kernel (``gpumodel.llm.inference.host_terms``): a figure
given (``host_per_kernel_s``) > a calibration fitted from the user's trace (``calibrate
--trace``) > this profile (measured, or the typical host).
"""

from __future__ import annotations

import functools
import math
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator

from gpumodel import _paths
from gpumodel._io import dump_yaml
from gpumodel._validators import (
    Checked,
    HostCallSeconds,
    HostCallSecondsOrZero,
    HostSecondsOrZero,
    HostStepSecondsOrZero,
    PrintableName,
)
from gpumodel.errors import SpecError, UnknownModelError

# The profile a prediction assumes when none is given and none was measured locally: the median
# of the host profiles measured on the device machines (specs/hosts/typical.yaml, built by
# validation/hosts/typical_hosts.py; until 2026-11-30 ``reference-h100``, the flat 26.6 us per
# eager call the model assumed before hosts were measured, 2-3x what those machines spend).
DEFAULT_HOST = "typical"
# The shipped profiles that stand for no machine in particular (a prediction with one of them
# has not measured its host: ``gpumodel.accuracy`` reports the "host not measured" figures).
SHIPPED_REFERENCE_HOSTS = (DEFAULT_HOST, "reference-h100")
# Used where a profile could not measure a graph figure (see specs/hosts/reference-h100.yaml).
REFERENCE_GRAPH_REPLAY_S = 20e-6
REFERENCE_GRAPH_KERNEL_S = 1.21e-6
LOCAL_HOST = "local"
# Host time torch's cuDNN attention spends building its graph for a shape it has not run:
# 50.2 ms, the median of 28 samples (42-62 ms p10-p90) of an HF Llama decode forward at a new
# KV length minus the same forward at a length seen, two model widths, batch 1 and 8 (H100 VM,
# torch 2.11.0+cu130, 2026-11-25; validation/results/h100-sxm/host-gap-2026-11-25). Used where
# a profile did not measure ``sdpa_graph_build_s``.
REFERENCE_SDPA_GRAPH_BUILD_S = 50.2e-3
# A host-device sync (``tensor.item()``, ``nonzero``: a 4 KB device-to-host copy into pinned
# memory, then a stream synchronize) on an idle GPU: 17.7 us, the median of the 86 host profiles
# under validation/results (15.4-25.6 us, H100 and H200 VMs, 2026-11-24..29). Used where a
# profile did not time its host copies (``host_copy_s``).
REFERENCE_HOST_SYNC_S = 17.7e-6


#: The SDPA probes whose launches a profile counts, and the most kernels one such call launches
#: (the backward probe's 5 on FlashAttention-2; 64 leaves room for any library).
SDPA_PROBES = ("sdpa", "sdpa_forced", "sdpa_mask", "sdpa_backward")
MAX_PROBE_KERNELS = 64

# HostProfile's scalar fields that time the host (scaled by ``HostProfile.scaled``)
HOST_SIDE_FIELDS = ("kernel_launch_s", "hf_decoder_layer_s", "hf_model_step_s",
                     "hf_model_layer_s", "profiler_event_s", "sdpa_graph_build_s",
                     "graph_replay_s", "compiled_step_launch_s", "hf_moe_layer_s")  # fmt: skip


class EagerOpCosts(Checked):
    """Host seconds of one eager PyTorch call of each kind, issued back to back (dispatcher +
    Python of the call + the launch, when it launches)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True,
                              serialize_by_alias=True)  # fmt: skip
    matmul: HostCallSeconds
    elementwise: HostCallSeconds
    reduction: HostCallSeconds
    norm: HostCallSeconds
    view: HostCallSecondsOrZero
    cat: HostCallSeconds
    copy_: HostCallSeconds = Field(alias="copy")  # "copy" would shadow BaseModel.copy
    index: HostCallSeconds
    sdpa: HostCallSeconds
    optimizer_step: HostCallSeconds
    # F.conv2d (cuDNN, channels_last: one kernel); profiles measured before it was: None
    # (``cost_s`` uses matmul's)
    conv: HostCallSeconds | None = None
    # torch._scaled_mm (fp8: its scale tensors and cuBLASLt descriptors cost more host time
    # than torch.matmul's call); profiles measured before it was, or GPUs without fp8: None
    # (``cost_s`` uses matmul's)
    scaled_mm: HostCallSeconds | None = None
    # SDPA called otherwise than the ``sdpa`` probe's default call (profiles from 2026-12-01;
    # None before: ``cost_s`` uses sdpa's): inside ``with sdpa_kernel(...)`` (a backend forced
    # around each call, PyTorch's documented pattern), with a boolean ``attn_mask`` (converted
    # to an additive one inside the call), and the backward of one call (``torch.autograd.grad``
    # over its retained graph)
    sdpa_forced: HostCallSeconds | None = None
    sdpa_mask: HostCallSeconds | None = None
    sdpa_backward: HostCallSeconds | None = None


#: Eager kinds a profile may not have measured, and the kind whose figure stands in for each.
EAGER_KIND_FALLBACK = {"conv": "matmul", "scaled_mm": "matmul", "sdpa_forced": "sdpa",
                       "sdpa_mask": "sdpa", "sdpa_backward": "sdpa"}  # fmt: skip
#: One eager ``torch.distributed`` call (1 KiB ``dist.all_reduce``, a one-rank NCCL group) over
#: the host profile's ``elementwise`` figure measured in the same device call on an H200 VM:
#: 25.8 us / 7.89 us (validation/results/h200-sxm/dist-call-host-2026-12-01; against a plain
#: ``x.add_(1)`` loop the call was 2.53x there, 2.77x on the VM of 2026-11-29). A profile times
#: no collective: the ``collective`` kind costs this x its ``elementwise`` figure.
COLLECTIVE_OVER_ELEMENTWISE = 25.8 / 7.89
#: The SDPA probes' call (``eager_op_s.sdpa*``): a decode-sized problem whose GPU time is far
#: below its host time on every GPU measured (batch, heads, query length, key length, head dim).
SDPA_PROBE_SHAPE = (1, 8, 1, 128, 64)
#: The backward probe's q, k and v (batch, heads, length, head dim): a short prefill, as training
#: calls it.
SDPA_BACKWARD_PROBE_SHAPE = (1, 8, 128, 64)


#: The host copies a profile times (``host_copy_s``): direction and host memory.
HOST_COPY_KINDS = ("h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable")
#: The size of those copies: small enough that the link's time is a rounding error of the
#: fixed cost (4 KB at 12 GB/s pageable: 0.3 us of ~15-35 us).
HOST_COPY_PROBE_BYTES = 4096


class HostCopyCosts(Checked):
    """Wall-clock seconds of one 4 KB host<->device copy and its synchronisation, per direction
    and host memory, on this host. The fixed cost of a small copy is the host's, not the
    GPU's: 4 KB pinned ``.to('cuda')`` took 15.6-29.5 us on eight H100/H200 VMs of one type
    (validate's copies, ``validation/results/unseen-h*-run*/host-copies.json``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    h2d_pinned: HostCallSeconds
    h2d_pageable: HostCallSeconds
    d2h_pinned: HostCallSeconds
    d2h_pageable: HostCallSeconds


class HostProfile(Checked):
    """One machine's host-side costs (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    host_profile: Literal[1]
    name: PrintableName
    measured_at: str
    cpu_model: str
    cpu_cores: int = Field(ge=1)
    python: str
    torch: str
    transformers: str | None = None
    cuda_driver: str | None = None
    gpu: str
    eager_op_s: EagerOpCosts
    kernel_launch_s: HostCallSeconds | None = None
    hf_decoder_layer_s: HostCallSeconds | None = None
    hf_decoder_layer_kernels: int | None = Field(None, ge=1, le=10_000)
    hf_model_step_s: HostStepSecondsOrZero | None = None
    hf_model_layer_s: HostCallSeconds | None = None
    # host time per HF Mixtral decoder layer (transformers 5's grouped experts) inside a model
    hf_moe_layer_s: HostCallSeconds | None = None
    # one HF Mixtral sparse-MoE block timed alone (read, not used: one profile of 2026-11-29,
    # validation/results/steps-h200-moe-run3, has it; alone, it matched its kernels' per-kind
    # costs x the layer's speed within 4%, so the block was not what the MoE layers missed)
    hf_moe_block_s: HostCallSeconds | None = None
    hf_moe_block_kernels: int | None = Field(None, ge=1, le=10_000)
    profiler_event_s: HostCallSecondsOrZero | None = None
    sdpa_graph_build_s: HostStepSecondsOrZero | None = None
    # None where the machine could not measure it (no CUDA, no compile): REFERENCE_* is used
    graph_replay_s: HostCallSecondsOrZero | None = None
    graph_replay_per_kernel_s: HostCallSecondsOrZero | None = None
    compiled_step_launch_s: HostStepSecondsOrZero | None = None
    host_copy_s: HostCopyCosts | None = None
    spread: dict[str, tuple[HostSecondsOrZero, HostSecondsOrZero]] = Field(default_factory=dict)
    host_drift: tuple[float, float] | None = None
    # kernels each SDPA probe launched per call, counted by torch.profiler after the rounds
    # (profiles from 2026-12-01; ``probe_launches``)
    probe_kernels: dict[Literal[SDPA_PROBES], int] | None = None  # type: ignore[valid-type]
    # provenance that `gpumodel validate --host-only` records beside the figures (named here so
    # that any other key is still an error)
    notes: str | dict[str, Any] | None = None
    hostname: str | None = None
    cuda_runtime: str | None = None
    os_kernel: str | None = None
    device: str | None = None
    method: dict[str, Any] | None = None
    shapes: dict[str, Any] | None = None
    origin: str | None = Field(None, exclude=True)  # the file it was read from (not stored)

    @field_validator("measured_at")
    @classmethod
    def _iso(cls, value: str) -> str:
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"measured_at must be ISO 8601, got {value!r}") from None
        return value

    @field_validator("probe_kernels")
    @classmethod
    def _probe_counts(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        for kind, n in (value or {}).items():
            if not 1 <= n <= MAX_PROBE_KERNELS:
                raise ValueError(f"probe_kernels.{kind}: a call launches 1-{MAX_PROBE_KERNELS} "
                                 f"kernels, got {n}")  # fmt: skip
        return value

    @field_validator("host_drift")
    @classmethod
    def _drift(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None:
            lo, hi = value
            if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= 1 <= hi <= 100):
                raise ValueError(f"host_drift must be [p10, p90] factors with 0 < p10 <= 1 "
                                 f"<= p90 <= 100, got {list(value)}")  # fmt: skip
        return value

    def scaled(self, factor: float) -> HostProfile:
        """This profile with every host-side time multiplied by ``factor`` (the host running
        that much slower: its drift, the slowest of several ranks); GPU-side figures
        (``graph_replay_per_kernel_s``) unchanged. Derived, not read: not validated again (a
        profile near its bounds, slowed, is still this profile)."""
        if not factor > 0 or not math.isfinite(factor):
            raise SpecError(f"a host's slow-down factor must be a positive number, got {factor}")
        ops = {k: v * factor for k, v in self.eager_op_s.model_dump().items() if v is not None}
        fields = {k: getattr(self, k) * factor for k in HOST_SIDE_FIELDS
                  if getattr(self, k) is not None}  # fmt: skip
        return self.model_copy(update={**fields, "eager_op_s": self.eager_op_s.model_copy(
            update=ops)})  # fmt: skip

    @property
    def replay_s(self) -> float:
        """Host time to launch a captured graph (``graph_replay_s``, else the reference)."""
        return REFERENCE_GRAPH_REPLAY_S if self.graph_replay_s is None else self.graph_replay_s

    @property
    def in_graph_kernel_s(self) -> float:
        """GPU time per kernel back to back (``graph_replay_per_kernel_s``, else reference)."""
        v = self.graph_replay_per_kernel_s
        return REFERENCE_GRAPH_KERNEL_S if v is None else v

    @property
    def compiled_launch_s(self) -> float:
        """Host time of a compiled (reduce-overhead) step call (else the graph replay)."""
        v = self.compiled_step_launch_s
        return self.replay_s if v is None else v

    @property
    def graph_build_s(self) -> float:
        """Host time of a cuDNN attention call at new shapes (``sdpa_graph_build_s``, else the
        reference)."""
        v = self.sdpa_graph_build_s
        return REFERENCE_SDPA_GRAPH_BUILD_S if v is None else v

    def sync_s(self) -> float:
        """Host time of one host-device sync (``.item()``): the profile's 4 KB pinned
        device-to-host copy, which synchronizes, else ``REFERENCE_HOST_SYNC_S``."""
        v = self.copy_cost_s("d2h", True)
        return REFERENCE_HOST_SYNC_S if v is None else v

    def copy_cost_s(self, direction: str, pinned: bool) -> float | None:
        """Wall seconds of a 4 KB copy of that direction and host memory, if measured."""
        costs = self.host_copy_s
        kind = f"{direction}_{'pinned' if pinned else 'pageable'}"
        return None if costs is None else float(getattr(costs, kind))

    def label(self) -> str:
        """'reference-h100 (Intel Xeon ..., 2026-11-22, torch 2.11)'."""
        return (f"{self.name} ({self.cpu_model}, {self.gpu}, {self.measured_at[:10]}, "
                f"torch {self.torch})")  # fmt: skip

    def per_layer_host_s(self) -> float | None:
        """Measured host time per eager HF decoder layer per kernel it launched, if measured."""
        if self.hf_decoder_layer_s is None or not self.hf_decoder_layer_kernels:
            return None
        return self.hf_decoder_layer_s / self.hf_decoder_layer_kernels

    def mismatch(self) -> str | None:
        """One line when the machine this runs on is not the one the profile was measured on
        (CPU model from /proc/cpuinfo); None when they agree or the CPU is unknown."""
        here = local_cpu_model()
        if here is None or _norm(here) == _norm(self.cpu_model):
            return None
        return (f"host profile '{self.name}' was measured on {self.cpu_model}; this machine is "
                f"{here}: host-bound steps may differ (measure it: gpumodel validate "
                "--host-only)")  # fmt: skip

    def probe_launches(self, kind: str) -> int:
        """Kernels the profile's own probe of ``kind`` launched per call. Profiles written
        before 2026-11-25 timed ``conv`` on an NCHW bf16 ``F.conv2d`` (their ``shapes`` name no
        layout), which runs cuDNN's three layout transposes around the convolution: 4 kernels.
        Later ones time channels-last, one kernel. The SDPA probes: as counted
        (``probe_kernels``), else what ``Attention`` says its library launches for the probe's
        call on the profile's GPU (a profile from before 2026-12-01)."""
        kind = self.measured_kind(kind)
        if self.probe_kernels and kind in self.probe_kernels:
            return self.probe_kernels[kind]
        probe = str((self.shapes or {}).get("eager_ops", ""))
        if kind == "conv" and "F.conv2d" in probe:
            return 1 if "channels_last" in probe else 4
        if kind.startswith("sdpa"):
            return _sdpa_probe_launches(self.gpu, kind)
        return 1

    def measured(self, kind: str) -> bool:
        """Whether this profile timed eager calls of ``kind`` itself (``conv``, ``scaled_mm``
        and the SDPA variants may be missing: ``EAGER_KIND_FALLBACK``)."""
        return kind not in EAGER_KIND_FALLBACK or getattr(self.eager_op_s, kind) is not None

    def measured_kind(self, kind: str) -> str:
        """``kind``, or the kind whose figure stands in for it where it was not measured."""
        return kind if self.measured(kind) else EAGER_KIND_FALLBACK[kind]

    def cost_s(self, kind: str) -> float:
        """Host seconds of one eager call of ``kind`` (a key of ``eager_op_s``; one the profile
        did not measure: ``EAGER_KIND_FALLBACK``'s stand-in)."""
        if kind == "collective":
            return COLLECTIVE_OVER_ELEMENTWISE * self.cost_s("elementwise")
        kind = self.measured_kind(kind)
        return float(getattr(self.eager_op_s, "copy_" if kind == "copy" else kind))

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json", exclude_none=False, by_alias=True)
        data["spread"] = {k: list(v) for k, v in self.spread.items()}
        return dump_yaml(data)

    def save(self, path: str | Path) -> Path:
        """Write the profile atomically (temp file in the same folder + rename)."""
        from gpumodel._io import atomic_write_text

        return atomic_write_text(path, self.to_yaml(), "host profile", mkdir=True,
                                 replaces_input=True)  # fmt: skip


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


@functools.lru_cache(maxsize=1)
def local_cpu_model() -> str | None:
    """The 'model name' of this machine's first CPU (Linux /proc/cpuinfo), or None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def shipped_hosts_dir() -> Path:
    return _paths.specs_dir() / "hosts"


def user_hosts_dir() -> Path:
    from gpumodel.calibration import cache_dir

    return cache_dir() / "hosts"


def read_host_file(path: str | Path) -> HostProfile:
    """Parse and validate a host profile file; a defect is a SpecError naming the file. A file
    read before and unchanged since (same size and modification time) is not parsed again."""
    from gpumodel._io import as_path

    path = as_path(path, "host profile")
    try:
        st = path.stat()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read host profile ({exc.strerror})") from None
    return _read_host_file(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _read_host_file(name: str, mtime_ns: int, size: int) -> HostProfile:
    from gpumodel._io import read_yaml
    from gpumodel.specs import format_validation_error

    path = Path(name)
    data = read_yaml(path, "host profile")  # bounded, UTF-8, depth and aliases checked
    if not isinstance(data, dict):
        raise SpecError(f"{path}: host profile is empty or not a mapping")
    try:
        return HostProfile.model_validate({**data, "origin": str(path)})
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, f"{path}")) from None


def _search() -> list[Path]:
    return [user_hosts_dir(), shipped_hosts_dir()]


def list_hosts() -> list[HostProfile]:
    """Every host profile found (user cache first; a user profile hides a shipped one of the
    same name)."""
    seen: dict[str, HostProfile] = {}
    for folder in _search():
        if folder.is_dir():
            for path in sorted(folder.glob("*.yaml")):
                h = read_host_file(path)
                seen.setdefault(h.name, h)
    return list(seen.values())


def load_host(name_or_path: str | Path | HostProfile | None = None) -> HostProfile:
    """A host profile by name (user cache, then shipped ``specs/hosts``) or file path.
    ``None``: the locally measured profile (``local``) if there is one, else ``DEFAULT_HOST``."""
    if isinstance(name_or_path, HostProfile):
        return name_or_path
    if name_or_path is None:
        return default_host()
    from gpumodel._validators import check_name

    text = check_name(name_or_path, "host profile")
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or os.sep in text or path.is_file():
        return read_host_file(path)
    for folder in _search():
        candidate = folder / f"{text}.yaml"
        if candidate.is_file():
            return read_host_file(candidate)
    known = [h.name for h in list_hosts()]
    for h in list_hosts():
        if h.name == text:
            return h
    raise UnknownModelError(text, known, what="host profile")


def default_host() -> HostProfile:
    """The host a prediction assumes when none is given: ``local.yaml`` in the user cache if
    present; else the newest profile there (``gpumodel validate --host-only`` writes
    ``measured-<hostname>-<date>.yaml``) measured on this machine's CPU model; else the named
    shipped typical host ``DEFAULT_HOST`` with its figures."""
    folder = user_hosts_dir()
    local = folder / f"{LOCAL_HOST}.yaml"
    if local.is_file():
        return read_host_file(local)
    here = local_cpu_model()
    if here is not None and folder.is_dir():
        mine = [h for h in (read_host_file(p) for p in sorted(folder.glob("*.yaml")))
                if _norm(h.cpu_model) == _norm(here)]  # fmt: skip
        if mine:
            return max(mine, key=lambda h: h.measured_at)
    return load_host(DEFAULT_HOST)


def host_dict(host: HostProfile) -> dict[str, Any]:
    """What a result records about the host it assumed."""
    out = {"name": host.name, "cpu_model": host.cpu_model, "gpu": host.gpu,
           "measured_at": host.measured_at, "source": host.origin or "given"}  # fmt: skip
    if host.host_drift is not None:
        out["drift"] = "{:g}-{:g}".format(*host.host_drift)
    return out


@functools.lru_cache(maxsize=32)
def _sdpa_probe_launches(gpu_name: str, kind: str) -> int:
    """Kernels the SDPA probe ``kind`` (``EAGER_OPS_PROBES``) launches on the GPU a profile
    names, as ``Attention.host_launches`` counts them there; 1 where no spec matches."""
    from gpumodel.diagnose.gpus import gpu_from_device_name
    from gpumodel.ops.attention import Attention

    gpu = gpu_from_device_name(gpu_name)
    if gpu is None:
        return 1
    if kind == "sdpa_backward":
        b, h, s, d = SDPA_BACKWARD_PROBE_SHAPE
        op = Attention(batch=b, heads=h, seq=s, head_dim=d, backward=True)
    else:
        b, h, s, kv, d = SDPA_PROBE_SHAPE
        op = Attention(batch=b, heads=h, seq=s, kv_seq=kv, head_dim=d, mask=kind == "sdpa_mask")
    return op.on(gpu).host_launches(gpu) or 1
