"""Every file gpumodel reads or writes goes through here: bounded reads, atomic writes.

Reads: only regular files (``/dev/zero``, FIFOs and directories are refused before a byte is
read), at most a size limit (``GPUMODEL_MAX_INPUT_MB``, or ``--max-input-mb`` where a command
offers it; gzip is decompressed as a stream and stopped at the same limit), UTF-8 (a binary file
is a one-line error), and the nesting depth of JSON and YAML checked before the real parse (a
bracket scan for JSON, the libyaml event stream for YAML, which is iterative: the recursive
composer that crashes on deep nesting never sees such a file). YAML aliases are refused: the
data files gpumodel reads do not need them, and they are how expansion bombs work.

Writes: a temp file in the target's directory, fsync, rename over the target. On any error
(a full disk, Ctrl-C, SIGTERM) the temp file is removed and the old file is left as it was.
The new file's mode follows the umask, as a plain ``open()`` would.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import signal
import stat
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpumodel.errors import GpumodelError, SpecError

DEFAULT_MAX_INPUT_MB = 512.0
DEFAULT_MAX_YAML_MB = 64.0  # YAML parses at ~10-50 MB/s: a bigger data file is a mistake
MAX_DEPTH = 64  # nesting depth of JSON/YAML documents (the data files need < 10)
MAX_LINE_BYTES = 2**20  # one JSONL/CSV row (a row is a few hundred bytes)
MAX_JSON_INT_DIGITS = 100
_SCAN_CHUNK = 1 << 22  # bytes per step of the JSON depth scan
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')  # deleted before the scan
_DIGITS_AS_ONES = bytes.maketrans(  # digits to 1, every other byte to a space
    bytes(range(256)), bytes(49 if 48 <= b <= 57 else 32 for b in range(256))
)


class InputFileError(SpecError):
    """A file cannot be read as input: missing, not a regular file, too big, binary, too deep."""


class OutputFileError(GpumodelError, OSError):
    """A result cannot be written where asked (a directory, an unwritable path, a full disk)."""


# ---------------------------------------------------------------------------------------------
# paths


def as_path(value: Any, what: str = "file") -> Path:
    """``value`` as a Path if it can name a file: a str or os.PathLike, no NUL byte, each
    component within the OS's limit. Anything else is one line (InputFileError), not the
    TypeError/ValueError/OSError the os calls would raise."""
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        shown = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a number"
        raise InputFileError(f"{what} must be a path, got {shown[:60]}")
    path = Path(value)
    text = str(path)
    if "\x00" in text:
        raise InputFileError(f"{what} path contains a NUL byte: {text[:60]!r}")
    if not text.strip():
        raise InputFileError(f"{what} path is empty")
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest > 255 or len(os.fsencode(text)) > 4095:
        raise InputFileError(f"{what} path is too long: {text[:60]}...")
    return path


def _is(path: Path, test: str) -> bool:
    """``path.is_dir()`` etc. that answer False for a path the OS refuses (ELOOP, EACCES...)."""
    try:
        return bool(getattr(path, test)())
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------
# reading


def max_input_bytes(yaml: bool = False) -> int:
    """The read limit: ``GPUMODEL_MAX_INPUT_MB`` if set, else 512 MB (64 MB for YAML)."""
    env = os.environ.get("GPUMODEL_MAX_INPUT_MB", "").strip()
    if env:
        try:
            mb = float(env)
        except ValueError:
            raise InputFileError(f"GPUMODEL_MAX_INPUT_MB must be a number, got {env!r}") from None
        if not 0 < mb < 2**40:
            raise InputFileError(f"GPUMODEL_MAX_INPUT_MB must be positive, got {env!r}")
    else:
        mb = DEFAULT_MAX_YAML_MB if yaml else DEFAULT_MAX_INPUT_MB
    return int(mb * 2**20)


@contextlib.contextmanager
def input_limit_mb(mb: float | None) -> Iterator[None]:
    """Within the block, reads are limited to ``mb`` MB (a command's ``--max-input-mb``)."""
    if mb is None:
        yield
        return
    if not (isinstance(mb, (int, float)) and 0 < mb < 2**40):
        raise InputFileError(f"--max-input-mb must be a positive number of MB, got {mb!r}")
    old = os.environ.get("GPUMODEL_MAX_INPUT_MB")
    os.environ["GPUMODEL_MAX_INPUT_MB"] = repr(float(mb))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("GPUMODEL_MAX_INPUT_MB", None)
        else:
            os.environ["GPUMODEL_MAX_INPUT_MB"] = old


def _too_big(path: Path, what: str, limit: int, decompressed: bool = False) -> InputFileError:
    kind = "decompresses to more than" if decompressed else "is larger than"
    return InputFileError(
        f"{path}: {what} {kind} the {limit / 2**20:g} MB input limit; raise it with "
        "GPUMODEL_MAX_INPUT_MB (or --max-input-mb) if the file is meant to be that big"
    )


# (device, inode) of every file a CLI command has read as input (None outside a command: a
# library script may load a file and save it back): an output written over one of them
# (``gpumodel calibrate --trace t.json.gz --out t.json.gz``) would destroy it, so
# ``check_target`` refuses them unless the writer updates that file on purpose
# (``replaces_input``: validate rewriting its calibration, a host profile measured again).
_READ_INPUTS: set[tuple[int, int]] | None = None


@contextlib.contextmanager
def command_inputs() -> Iterator[None]:
    """Within the block (one CLI command), outputs may not overwrite the files it read."""
    global _READ_INPUTS
    before, _READ_INPUTS = _READ_INPUTS, set()
    try:
        yield
    finally:
        _READ_INPUTS = before


def open_regular(path: str | Path, what: str = "file") -> tuple[Path, int, int]:
    """Open ``path`` for reading if it is a regular file: (path, fd, size). Opened non-blocking
    so a FIFO cannot hang the open; the type is checked on the open descriptor."""
    path = as_path(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read {what} ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise InputFileError(f"{path}: {what} is {kind}")
    if _READ_INPUTS is not None:
        _READ_INPUTS.add((st.st_dev, st.st_ino))
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return path, fd, st.st_size


def read_bytes(path: str | Path, what: str = "file", limit: int | None = None) -> bytes:
    """The bytes of a regular file, at most ``limit`` (default: the input limit)."""
    limit = max_input_bytes() if limit is None else limit
    path, fd, size = open_regular(path, what)
    with os.fdopen(fd, "rb") as fh:
        if size > limit:
            raise _too_big(path, what, limit)
        # at most the size fstat gave (+1 to see growth): read(n) allocates n bytes up front,
        # so read(limit + 1) would reserve the whole limit for a 1 kB file
        data = fh.read(min(size, limit) + 1)
        if len(data) > size:  # the file grew while read: read on, still stopped at the limit
            data += fh.read(limit + 1 - len(data))
    if len(data) > limit:
        raise _too_big(path, what, limit)
    return data


def gunzip(data: bytes, path: Path, what: str, limit: int) -> tuple[bytes, bool]:
    """Decompress gzip ``data`` as a stream, refusing output past ``limit``: (bytes, truncated)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = bytearray()
    chunk = 1 << 20
    pending = data
    try:
        while True:
            piece = d.decompress(pending, chunk)
            out += piece
            if len(out) > limit:
                raise _too_big(path, what, limit, decompressed=True)
            pending = d.unconsumed_tail
            if d.eof or (not pending and not piece):
                break
    except zlib.error:
        raise InputFileError(f"{path}: {what} is corrupt gzip data") from None
    return bytes(out), not d.eof


def decode_utf8(data: bytes, path: Path, what: str = "file") -> str:
    """UTF-8 text (a leading BOM dropped); binary content is a one-line error."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputFileError(
            f"{path}: {what} is not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 1]!r}"
            "; a binary file?)"
        ) from None
    if "\x00" in text:
        raise InputFileError(f"{path}: {what} contains NUL bytes (a binary file?)")
    return text


def read_text(path: str | Path, what: str = "file", limit: int | None = None) -> str:
    """A bounded, UTF-8 text file; gzip (by its magic bytes) is decompressed within the limit."""
    limit = max_input_bytes() if limit is None else limit
    data = read_bytes(path, what, limit)
    if data[:2] == b"\x1f\x8b":
        data, truncated = gunzip(data, Path(path), what, limit)
        if truncated:
            raise InputFileError(f"{path}: {what}: the gzip stream ends early (truncated file)")
    return decode_utf8(data, Path(path), what)


# ---------------------------------------------------------------------------------------------
# JSON


def json_depth(text: str | bytes, limit: int = MAX_DEPTH) -> int:
    """Deepest bracket nesting of a JSON text outside strings (the scan may stop once past
    ``limit``).

    Without a backslash before any quote (the usual trace), every quote delimits a string: the
    text is cut to its quotes and brackets (``bytes.translate``, one C pass), a bracket lies
    outside every string when an even number of quotes precede it, and the depth is the running
    sum of +1 per opening and -1 per closing bracket outside (~0.25 s for 54 MB on a 2-core CPU,
    against ~0.9 s for the same passes over every byte and ~2 s for the general scan)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    if b'\\"' in data:
        return _json_depth_escaped(data, limit)
    import numpy as np

    arr = np.frombuffer(data.translate(None, _NOT_STRUCTURE), dtype=np.uint8)
    # quotes up to each position, mod 2 (a uint8 sum wraps at 256, keeping its parity)
    in_string = np.cumsum(arr == 34, dtype=np.uint8) & 1
    table = np.zeros(256, dtype=np.int8)  # per byte: +1 for [ and {, -1 for ] and }
    table[[91, 123]] = 1
    table[[93, 125]] = -1
    step = table[arr]
    step[in_string == 1] = 0  # a bracket is never a quote: its parity counts the quotes before
    levels = np.cumsum(step, dtype=np.int32)
    return max(int(levels.max()), 0) if len(levels) else 0


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while a large document becomes many small objects,
    none of them garbage until the parse is done: otherwise the collector walks the growing
    heap again and again (1.0 s of json.loads' 1.7 s on a 54 MB trace, this 2-core CPU)."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def has_digit_run(data: bytes, longer_than: int) -> bool:
    """Whether ``data`` holds a run of more than ``longer_than`` ASCII digits: where it does
    not, no number in a JSON text can be long, and ``json.loads`` may parse integers with plain
    ``int`` (a Python callback per integer cost 0.5 s of a 54 MB trace's 1.4 million). Digits
    become ``1`` and every other byte a space (one C pass), then a substring search."""
    return b"1" * (longer_than + 1) in data.translate(_DIGITS_AS_ONES)


def _json_depth_escaped(data: bytes, limit: int) -> int:
    """``json_depth`` of a text with escaped quotes, stopping once past ``limit``: a chunked
    numpy scan: quotes not escaped (an even run of backslashes before them) toggle
    the in-string state; brackets outside strings count +1/-1."""
    import numpy as np

    arr = np.frombuffer(data, dtype=np.uint8)
    depth = 0
    deepest = 0
    in_string = False
    backslashes = 0  # run of backslashes ending the previous chunk
    step = _SCAN_CHUNK
    for start in range(0, len(arr), step):
        c = arr[start : start + step]
        idx = np.arange(len(c), dtype=np.int64)
        bs = c == 92
        # length of the backslash run ending just before each position
        last_other = np.maximum.accumulate(np.where(bs, -1, idx))
        run_before = np.empty(len(c), dtype=np.int64)
        run_before[0] = backslashes
        prev_run = idx[:-1] - last_other[:-1]  # run ending at i-1 (0 when c[i-1] is not '\\')
        head = last_other[:-1] < 0  # the run reaches back into the previous chunk
        run_before[1:] = np.where(head, prev_run + backslashes, prev_run)
        quote = (c == 34) & (run_before % 2 == 0)
        toggles = np.cumsum(quote)
        inside = ((toggles + in_string) % 2 == 1) & ~quote  # strictly within a string
        opening = ((c == 91) | (c == 123)) & ~inside
        closing = ((c == 93) | (c == 125)) & ~inside
        levels = depth + np.cumsum(opening.astype(np.int64) - closing.astype(np.int64))
        if len(levels):
            deepest = max(deepest, int(levels.max()))
            depth = int(levels[-1])
        if deepest > limit:
            return deepest
        in_string = bool((toggles[-1] + in_string) % 2) if len(c) else in_string
        tail = len(c) - 1 - int(last_other[-1]) if len(c) else 0
        backslashes = tail + backslashes if last_other[-1] < 0 else tail
    return deepest


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise ValueError(f"a {len(text)}-digit number")
    return int(text)


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members, refusing a key given twice (``json`` keeps the last silently: a
    batch row {"m": 4096, "m": 8192} would price 8192 without a word), as YAML input does."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _DuplicateKey(f"the key {key!r} is given twice in one object")
    return out


def loads_json(text: str, path: Path | str, what: str = "JSON", line: int | None = None) -> Any:
    """``json.loads`` with the depth checked first, over-long integers and a key given twice in
    one object refused. ``line``: the text is that line of ``path`` (a JSONL row): errors name
    it."""
    data = text.encode("utf-8")
    # fast path: no more opening brackets than the limit cannot nest deeper than it
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH and json_depth(data) > MAX_DEPTH:
        raise InputFileError(f"{path}: {what} nests deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, parse_int=_bounded_int, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        where = f"{path}:{line}" if line else f"{path}:{exc.lineno}:{exc.colno}"
        raise InputFileError(f"{where}: {what} is not valid JSON ({exc.msg})") from None
    except _DuplicateKey as exc:
        raise InputFileError(f"{f'{path}:{line}' if line else path}: {what}: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise InputFileError(f"{path}: {what} is not usable JSON ({exc})") from None


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    return loads_json(read_text(path, what), path, what)


# ---------------------------------------------------------------------------------------------
# YAML


def _yaml_loader() -> Any:
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def check_yaml_shape(text: str, path: Path | str, what: str = "YAML") -> None:
    """Walk the libyaml event stream (iterative, so deep nesting cannot crash it): refuse
    aliases, nesting deeper than MAX_DEPTH and a key given twice in one mapping (YAML loaders
    keep the last silently) before the recursive composer runs."""
    import yaml

    # one entry per open collection: [is a mapping, expects a key next, its keys, was a key]
    open_: list[list[Any]] = []

    def node_role() -> bool:
        """Whether the node starting now is a mapping's key; the mapping then expects the
        other of key and value."""
        if not open_ or not open_[-1][0]:
            return False
        role = open_[-1][1]
        open_[-1][1] = not role
        return role

    try:
        for event in yaml.parse(text, Loader=_yaml_loader()):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if len(open_) + 1 > MAX_DEPTH:
                    raise InputFileError(f"{path}: {what} nests deeper than {MAX_DEPTH} levels")
                open_.append([isinstance(event, yaml.MappingStartEvent), True, set(), node_role()])
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                open_.pop()
            elif isinstance(event, yaml.ScalarEvent):
                if node_role():
                    if event.value in open_[-1][2]:
                        line = event.start_mark.line + 1 if event.start_mark else "?"
                        raise InputFileError(f"{path}: line {line}: {what} gives the key "
                                             f"'{event.value}' twice in one mapping")  # fmt: skip
                    open_[-1][2].add(event.value)
            elif isinstance(event, yaml.AliasEvent):
                raise InputFileError(
                    f"{path}: {what} uses a YAML alias (*{event.anchor}); write the values out"
                )
    except yaml.YAMLError as exc:
        raise InputFileError(_yaml_message(exc, path, what)) from None


def _yaml_message(exc: Exception, path: Path | str, what: str) -> str:
    mark = getattr(exc, "problem_mark", None)
    line = f" line {mark.line + 1}" if mark else ""
    return f"{path}:{line} {what} is not valid YAML"


def loads_yaml(text: str, path: Path | str, what: str = "YAML") -> Any:
    """Safe-load YAML after its shape is checked (no aliases, bounded depth)."""
    import yaml

    check_yaml_shape(text, path, what)
    try:
        return yaml.load(text, Loader=_yaml_loader())
    except yaml.YAMLError as exc:
        raise InputFileError(_yaml_message(exc, path, what)) from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. a timestamp out of range
        raise InputFileError(f"{path}: {what} has an unusable value ({exc})") from None


def dump_yaml(data: Any, dumper: Any = None) -> str:
    """YAML text of ``data`` that ``loads_yaml`` reads back: objects that appear twice (a meta
    dict shared by two records) are written out twice, never as an anchor and alias, which the
    reader refuses."""
    import yaml

    base = dumper or yaml.SafeDumper

    class _NoAliases(base):  # type: ignore[misc, valid-type]
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return yaml.dump(data, Dumper=_NoAliases, sort_keys=False, width=100, allow_unicode=False)


def read_yaml(path: str | Path, what: str = "YAML file") -> Any:
    return loads_yaml(read_text(path, what, max_input_bytes(yaml=True)), path, what)


# ---------------------------------------------------------------------------------------------
# streamed lines (JSONL / CSV batch files)


def iter_lines(path: str | Path, what: str = "file") -> Iterator[tuple[int, str]]:
    """(line number, text) of a regular UTF-8 file, read one line at a time (constant memory);
    a line longer than 1 MiB, or the whole file past the input limit, is an error."""
    limit = max_input_bytes()
    path, fd, size = open_regular(path, what)
    if size > limit:
        os.close(fd)
        raise _too_big(path, what, limit)
    total = 0
    with os.fdopen(fd, "rb") as fh:
        for number, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), 1):
            total += len(raw)
            if len(raw) > MAX_LINE_BYTES:
                raise InputFileError(f"{path}:{number}: line longer than {MAX_LINE_BYTES:,} bytes")
            if total > limit:
                raise _too_big(path, what, limit)
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputFileError(
                    f"{path}:{number}: {what} is not UTF-8 text (a binary file?)"
                ) from None
            if "\x00" in line:
                raise InputFileError(f"{path}:{number}: {what} contains NUL bytes (a binary file?)")
            yield number, line


# ---------------------------------------------------------------------------------------------
# writing


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_dir(path: str | Path, what: str = "output directory") -> Path:
    """``mkdir -p`` with a one-line error (OutputFileError) instead of an OSError."""
    try:
        path = as_path(path, what)
    except InputFileError as exc:
        raise OutputFileError(str(exc)) from None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputFileError(f"{path}: cannot create {what} ({exc.strerror or exc})") from None
    return path


def check_target(path: str | Path, what: str = "output", replaces_input: bool = False) -> Path:
    """A path a result can be written to: its parent a writable directory, itself not a
    directory, nor (unless ``replaces_input``) a file this process read as input. Errors are
    one line (OutputFileError)."""
    try:
        path = as_path(path, what)
    except InputFileError as exc:
        raise OutputFileError(str(exc)) from None
    if str(path) == "-":  # would be a file named '-', not standard output
        raise OutputFileError(f"-: {what} is written to a file, not standard output; give a path")
    if _is(path, "is_dir"):
        raise OutputFileError(f"{path}: {what} path is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not _is(parent, "exists"):
        raise OutputFileError(f"{path}: the directory {parent} does not exist")
    if not _is(parent, "is_dir"):
        raise OutputFileError(f"{path}: {parent} is not a directory")
    if _is(path, "exists") and not _is(path, "is_file"):
        raise OutputFileError(f"{path}: {what} path exists and is not a regular file")
    if not replaces_input and _READ_INPUTS:
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is not None and (st.st_dev, st.st_ino) in _READ_INPUTS:
            raise OutputFileError(f"{path}: this command read that file as input; writing the "
                                  f"{what} there would destroy it: give another path")  # fmt: skip
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputFileError(f"{path}: cannot write {what} (directory {parent} is not writable)")
    return path


@contextlib.contextmanager
def _interrupts_as_exceptions() -> Iterator[None]:
    """SIGTERM during the write raises (like Ctrl-C) so the temp file is cleaned up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        old = signal.signal(signal.SIGTERM, on_term)
    except (ValueError, OSError):  # not settable here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _create_new(path: Path) -> None:
    """Create ``path``, empty, mode 0600 (as mkstemp does); an existing file is an error."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


@contextlib.contextmanager
def atomic_path(
    path: str | Path, what: str = "output", mkdir: bool = False, replaces_input: bool = False
) -> Iterator[Path]:
    """A temp path beside ``path`` to write to; renamed over ``path`` when the block ends
    without error, removed on any error (incl. KeyboardInterrupt and SIGTERM). ``path`` may be
    a file this process read only with ``replaces_input`` (``check_target``)."""
    path = check_target(path, what, replaces_input) if not mkdir else Path(path)
    if mkdir:
        try:
            path = as_path(path, what)
            path.parent.mkdir(parents=True, exist_ok=True)
        except InputFileError as exc:
            raise OutputFileError(str(exc)) from None
        except OSError as exc:
            raise OutputFileError(f"{path}: cannot create {path.parent} ({exc.strerror})") from None
        check_target(path, what, replaces_input)
    # The temp file's name is known before the file exists, inside the block that removes
    # it: Ctrl-C between tempfile.mkstemp creating it and the cleanup being in place left it
    # behind (fuzz seed 30). 64 random bits: no other writer's file has the name.
    tmp: Path | None = None
    try:
        with _interrupts_as_exceptions():
            tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
            _create_new(tmp)
            yield tmp
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a plain open() follows umask
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if isinstance(exc, GpumodelError):
            raise
        reason = "the disk is full" if exc.errno == errno.ENOSPC else exc.strerror or str(exc)
        kept = "the old file is kept" if path.exists() else "nothing was written"
        raise OutputFileError(f"{path}: cannot write {what} ({reason}); {kept}") from None
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(
    path: str | Path, data: bytes, what: str = "output", mkdir: bool = True,
    replaces_input: bool = False,
) -> Path:  # fmt: skip
    """Write ``data`` to ``path`` atomically: readers see the old file or the whole new one."""
    with atomic_path(path, what, mkdir, replaces_input) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
    return Path(path)


def atomic_write_text(
    path: str | Path, text: str, what: str = "output", mkdir: bool = True,
    replaces_input: bool = False,
) -> Path:  # fmt: skip
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    with (
        atomic_path(path, what, mkdir, replaces_input) as tmp,
        open(tmp, "w", encoding="utf-8") as fh,
    ):
        fh.write(text)
        fh.flush()
    return Path(path)


def save_figure(fig: Any, path: str | Path, **savefig_kwargs: Any) -> Path:
    """``fig.savefig`` through a temp file in the target's directory, then rename (a full disk
    leaves the old image, not a truncated one). The format comes from ``path``'s suffix."""
    path = Path(path)
    fmt = savefig_kwargs.pop("format", None) or (path.suffix.lstrip(".").lower() or "png")
    with atomic_path(path, "plot", mkdir=True) as tmp:
        try:
            fig.savefig(tmp, format=fmt, **savefig_kwargs)
        except ValueError as exc:  # e.g. an image format matplotlib does not write
            raise OutputFileError(f"{path}: cannot write the plot ({exc})") from None
    return path


def write_with(path: str | Path, writer: Callable[[Path], None], what: str = "output") -> Path:
    """Call ``writer(temp_path)`` and rename the result over ``path`` (for writers that want a
    path, not a string)."""
    with atomic_path(path, what) as tmp:
        writer(tmp)
    return Path(path)


__all__ = [
    "MAX_DEPTH",
    "InputFileError",
    "OutputFileError",
    "as_path",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_target",
    "check_yaml_shape",
    "decode_utf8",
    "gc_paused",
    "gunzip",
    "has_digit_run",
    "input_limit_mb",
    "iter_lines",
    "json_depth",
    "loads_json",
    "loads_yaml",
    "make_dir",
    "max_input_bytes",
    "read_bytes",
    "read_json",
    "read_text",
    "read_yaml",
    "save_figure",
]
