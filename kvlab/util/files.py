"""Reading inputs within limits and writing outputs whole: a reader never sees a partial file, a bad input
never costs more than its limit, and every error is one line that names the file (and line).

Inputs: a path, ``-`` for standard input, or a ``.gz`` file (decompressed as it streams). Outputs: written to
temporary files beside their targets and renamed over them only when all are complete, with the mode the file
replaced had, else the one the umask gives (not ``mkstemp``'s 0600); a write-protected file is not replaced.
"""

import errno
import gzip
import io
import json
import math
import os
import re
import stat
import sys
import tempfile

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_LINE_BYTES",
    "InputError",
    "cell",
    "csv_text",
    "dump_json",
    "finite",
    "frame_csv",
    "line_batches",
    "line_of",
    "lines",
    "number_in",
    "number_text",
    "open_input",
    "parse_json",
    "read_bytes",
    "read_json",
    "shown",
    "write_together",
]

# Limits that real inputs stay far below (a Mooncake or Bailian trace line is a few hundred kB at most; a
# 10M-request trace is a few GB and is streamed line by line, never read whole).
MAX_LINE_BYTES = 64 * 2**20
MAX_FILE_BYTES = 512 * 2**20  # a file read whole: a JSON document, a CSV table, a model config
BATCH_BYTES = 4 * 2**20  # what a fast reader reads at once
NEWLINE = b"\n"


class InputError(ValueError):
    """A bad input file; the message is the whole one-line explanation, naming the file (and line)."""


def open_input(path):
    """A binary stream of ``path``: ``-`` is standard input, ``*.gz`` is decompressed as it is read. A named pipe
    with no writer is an InputError at once (opening it would wait for one for ever)."""
    if path == "-":
        try:
            return os.fdopen(os.dup(sys.stdin.fileno()), "rb")
        except (OSError, ValueError, AttributeError):  # standard input closed
            raise InputError("-: cannot read: standard input is closed") from None
    try:
        raw = open_pipe(path) if is_fifo(path) else open(path, "rb")
        return _Gunzipped(fileobj=raw, mode="rb") if str(path).endswith(".gz") else raw
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror}") from None


def is_fifo(path):
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


MAX_EXPANSION = 200  # a .gz trace or measurement expands 3 to 30 times; a file of newlines, about 1,000
EXPANSION_SLACK = 16 * 2**20  # bytes any .gz may expand to before its ratio is judged


class _Gunzipped(gzip.GzipFile):
    """A .gz stream that closes its file with it, and stops a compression bomb: past :data:`EXPANSION_SLACK`, more
    than :data:`MAX_EXPANSION` bytes out per compressed byte in is an error, not minutes of reading nothing."""

    expanded = 0

    def _counted(self, data):
        self.expanded += len(data)
        if self.expanded > EXPANSION_SLACK:
            try:
                compressed = max(self.fileobj.tell(), 1)
            except (OSError, ValueError):  # a pipe: its position is unknown, its ratio not judged
                return data
            if self.expanded > MAX_EXPANSION * compressed:
                raise OSError(errno.EFBIG, f"expands more than {MAX_EXPANSION} times its compressed size (a bomb?)")
        return data

    def read(self, size=-1):
        return self._counted(super().read(size))

    def read1(self, size=-1):
        return self._counted(super().read1(size))

    def readline(self, size=-1):
        return self._counted(super().readline(size))

    def close(self):
        raw = self.fileobj
        super().close()
        if raw is not None:
            raw.close()


class _Prefixed(io.RawIOBase):
    """A pipe's stream with the bytes read to find its writer put back in front."""

    def __init__(self, head, fd):
        self._head, self._fd = head, fd

    def readable(self):
        return True

    def fileno(self):
        return self._fd

    def readinto(self, buffer):
        if self._head:
            count = min(len(buffer), len(self._head))
            buffer[:count], self._head = self._head[:count], self._head[count:]
            return count
        return os.readv(self._fd, [buffer])

    def close(self):
        if not self.closed:
            os.close(self._fd)
        super().close()


def open_pipe(path):
    """A named pipe opened without waiting: with no writer (a read gives nothing at once) it is an error, not a
    wait for ever; with one, a blocking stream of what it writes."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        head = os.read(fd, BATCH_BYTES)
    except BlockingIOError:  # a writer, nothing written yet
        head = b""
    else:
        if not head:
            os.close(fd)
            raise OSError(errno.EPIPE, "a named pipe with no writer (nothing to read)", path)
    os.set_blocking(fd, True)
    return io.BufferedReader(_Prefixed(head, fd))


def lines(path):
    """Yield ``(number, raw line)`` of ``path`` (1-based); a line longer than :data:`MAX_LINE_BYTES`, an
    unreadable or a corrupt compressed file is an InputError naming ``path:line``."""
    with open_input(path) as handle:
        number = 0
        while True:
            number += 1
            try:
                raw = handle.readline(MAX_LINE_BYTES + 1)
            except (OSError, EOFError, gzip.BadGzipFile) as error:
                reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
                raise InputError(f"{path}:{number}: cannot read: {reason}") from None
            if not raw:
                return
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(f"{path}:{number}: line longer than {MAX_LINE_BYTES} bytes")
            yield number, raw


def line_batches(path, size=BATCH_BYTES):
    """Yield ``(first line number, raw lines, fraction read)`` of ``path`` in batches of about ``size`` bytes
    (a fast reader's input: one read and one split per batch, not per line); the same limits and errors as
    :func:`lines`. The fraction is of the file's bytes (of a .gz file, its compressed bytes); None when the
    size is unknown (standard input, a pipe)."""
    with open_input(path) as handle:
        raw = getattr(handle, "fileobj", handle)  # a .gz file: the compressed stream beneath
        try:
            total = os.fstat(raw.fileno()).st_size if stat.S_ISREG(os.fstat(raw.fileno()).st_mode) else 0
        except (OSError, AttributeError, ValueError):
            total = 0
        number, rest = 1, b""
        while True:
            try:
                data = handle.read(size)
            except (OSError, EOFError, gzip.BadGzipFile) as error:
                reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
                raise InputError(f"{path}:{number + rest.count(NEWLINE)}: cannot read: {reason}") from None
            if not data:
                if len(rest) > MAX_LINE_BYTES:
                    raise InputError(f"{path}:{number}: line longer than {MAX_LINE_BYTES} bytes")
                if rest:
                    yield number, [rest], 1.0 if total else None
                return
            data = rest + data if rest else data
            batch = data.split(NEWLINE)
            rest = batch.pop()
            if len(data) > MAX_LINE_BYTES and batch and max(map(len, batch)) >= MAX_LINE_BYTES:  # with its newline
                long = next(index for index, line in enumerate(batch) if len(line) >= MAX_LINE_BYTES)
                raise InputError(f"{path}:{number + long}: line longer than {MAX_LINE_BYTES} bytes")
            if len(rest) > MAX_LINE_BYTES:
                raise InputError(f"{path}:{number + len(batch)}: line longer than {MAX_LINE_BYTES} bytes")
            if batch:
                yield number, batch, min(raw.tell() / total, 1.0) if total else None
                number += len(batch)


def read_bytes(path, limit=MAX_FILE_BYTES):
    """The whole of ``path`` (at most ``limit`` bytes, else an InputError)."""
    with open_input(path) as handle:
        try:
            data = handle.read(limit + 1)
        except (OSError, EOFError, gzip.BadGzipFile) as error:
            reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
            raise InputError(f"{path}: cannot read: {reason}") from None
    if len(data) > limit:
        raise InputError(f"{path}: larger than {limit} bytes")
    return data


def no_constant(name):
    """json's hook for NaN and Infinity: strict JSON has neither."""
    raise ValueError(f"{name} is not a number JSON allows")


def unique_fields(pairs, twice="field {!r} given twice"):
    """A JSON object's fields as a dict (json's ``object_pairs_hook``); a field given twice is a ValueError saying
    ``twice`` of it (which one counts is not obvious: json would keep the last silently)."""
    record = dict(pairs)
    if len(record) != len(pairs):
        seen = set()
        name = next(name for name, _ in pairs if name in seen or seen.add(name))
        raise ValueError(twice.format(name))
    return record


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{shown(text)} is beyond the float range")
    return value


def parse_json(data, where, pairs=None, constants=False):
    """One JSON document from bytes; InputError naming ``where`` if it is not strict JSON (no NaN, no
    Infinity), is nested deeper than Python's recursion allows, or holds an integer too long to convert.
    ``pairs`` makes each object from its list of fields (json's ``object_pairs_hook``); its ValueError is an error
    of the input too. With ``constants`` NaN and Infinity are read as floats (what Python's json writes: a
    published model config can hold them)."""
    try:
        return json.loads(
            data.decode("utf-8"),
            parse_constant=float if constants else no_constant,
            parse_float=float if constants else _finite_float,
            object_pairs_hook=pairs,
        )
    except UnicodeDecodeError:
        raise InputError(f"{where}: not UTF-8 text") from None
    except RecursionError:
        raise InputError(f"{where}: malformed JSON (nested too deeply)") from None
    except ValueError as error:  # JSONDecodeError, NaN/Infinity, an integer too long to convert
        raise InputError(f"{where}: malformed JSON ({getattr(error, 'msg', error)})") from None


def read_json(path, limit=MAX_FILE_BYTES, constants=False):
    """The JSON document in ``path``; InputError naming the file on any problem (``constants`` as parse_json's)."""
    return parse_json(read_bytes(path, limit), path, constants=constants)


WHOLE_TEXT = re.compile(r"[+-]?[0-9]+")
DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def number_text(text, whole=False):
    """Whether ``text`` is a number in ASCII digits, as JSON and YAML write one: Python's ``int`` and ``float``
    (and ``Decimal``) also take ``1_000``, other scripts' digits (``١٢٣``) and surrounding spaces."""
    return isinstance(text, str) and (WHOLE_TEXT if whole else DECIMAL_TEXT).fullmatch(text) is not None


def number_in(low, high, what):
    """A converter to a number from ``low`` to ``high`` (``what`` names them in the error); NaN, the infinities
    and text are refused (the flags' and the Python API's one rule)."""

    def convert(text):
        value = float(text) if number_text(text) else math.nan
        if not low <= value <= high:
            raise ValueError(f"expected {what}, got {shown(text)}")
        return value

    return convert


def shown(value, limit=40):
    """``repr(value)``, cut to ``limit`` characters: a message stays one short line whatever the input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'"


def finite(value):
    """True when every number in ``value`` (nested lists, tuples and dicts) is finite."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return all(finite(item) for item in value)
    return True


def dump_json(document):
    """The one JSON layout of every artifact: indent 2, insertion key order, trailing newline, strict (a
    non-finite number is a ValueError, never ``NaN`` in a file)."""
    try:
        return json.dumps(document, indent=2, allow_nan=False) + "\n"
    except ValueError:
        raise ValueError("a result is not a finite number (an input too large?)") from None


FORMULA = ("=", "+", "-", "@")  # what a spreadsheet may read as a formula's start (OWASP)
RISKY = ("\t", "\r", "\n")  # starts OWASP names too


def cell(value):
    """A CSV cell a spreadsheet shows and never runs (OWASP's "CSV Injection"): text starting as a formula would,
    or whose first character past whitespace and control characters does (some spreadsheets strip those first),
    put behind a ``'``; a carriage return made a newline (Python's csv quotes a field holding a newline, not one
    holding a lone carriage return, which readers take for the row's end: what follows would start a row of its
    own). A number stays a number, a negative one too."""
    if not isinstance(value, str):
        return value
    first = next((char for char in value if char.isprintable() and not char.isspace()), "")
    return ("'" if value.startswith(RISKY) or first in FORMULA else "") + value.replace("\r", "\n")


def csv_text(rows, columns):
    """Rows (dicts) as CSV text with ``columns`` in order, each cell as :func:`cell` makes it; a non-finite
    number is a ValueError."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        if not finite(row):
            raise ValueError("a result is not a finite number (an input too large?)")
        writer.writerow({name: cell(value) for name, value in row.items()})
    return out.getvalue()


def frame_csv(table):
    """A pandas DataFrame as CSV text (pandas' writer, for a long table), its text cells as :func:`cell` makes
    them."""
    text = table.select_dtypes(include=["object", "string"]).columns
    return table.assign(**{name: table[name].map(cell) for name in text}).to_csv(index=False, lineterminator="\n")


def _mode():
    """The mode a new file gets under the process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _kept_mode(target, new):
    """The permission bits of the file ``target`` that an output replaces, as a shell's ``>`` keeps them (a private
    file stays private; set-user-ID and the like dropped, as a write drops them); ``new`` where there is none."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode) & 0o777
    except OSError:
        return new


def check_writable(target):
    """A PermissionError if ``target`` is a write-protected file (no write bit, or none this user has), as ``cp``
    and a shell's ``>`` refuse it: a rename would replace it without its permission (root's too, against what its
    mode says)."""
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return
    if not mode & 0o222 or not os.access(target, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), target)


def special(path):
    """Whether ``path`` exists and is neither a regular file nor a folder (a device, a pipe): written in place,
    never replaced by a rename (a rename over /dev/full would replace the device)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def write_in_place(path, data):
    """Write a device or a pipe where it is; a named pipe with no reader is an error, not a wait for ever."""
    if is_fifo(path):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno == errno.ENXIO:
                raise OSError(errno.ENXIO, "a named pipe with no reader", path) from None
            raise
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "wb")
    else:
        handle = open(path, "wb")
    with handle:
        handle.write(data)


def write_together(texts):
    """Write ``{path: text or bytes}`` so that either every file is replaced or none is: all go to temporary
    files first, then are renamed (a device or a pipe is written in place, after the temporary files and
    before any rename). A symbolic link is written through: its target is replaced, the link stays. An OSError
    names the file it failed on (``error.filename``)."""
    written = []
    mode = _mode()
    path = None
    encoded = {path: text if isinstance(text, bytes) else text.encode("utf-8") for path, text in texts.items()}
    try:
        for path, data in encoded.items():
            if not path:  # no file ("" would be renamed over the working folder)
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            if os.path.isdir(path):  # a rename over a folder would fail after others were done: check first
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            if special(path):
                continue
            target = os.path.realpath(path)  # a link's target (a link to a missing file: that file)
            check_writable(target)
            fd, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".kvlab-", suffix=".tmp")
            written.append((temporary, target, path))
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(temporary, _kept_mode(target, mode))
        for path, data in encoded.items():
            if special(path):
                write_in_place(path, data)
        while written:  # a rename that fails leaves no temporary file behind
            temporary, target, path = written[0]
            os.replace(temporary, target)
            written.pop(0)
    except OSError as error:
        _discard(written)
        raise OSError(error.errno, error.strerror, error.filename if error.filename in texts else path) from None
    except BaseException:
        _discard(written)
        raise


def _discard(written):
    for temporary, *_ in written:
        try:
            os.unlink(temporary)
        except OSError:
            pass


def line_of(root, path):
    """The line of config key ``path`` (a tuple of keys and indexes) in the composed YAML, or of its deepest
    existing parent."""
    import yaml

    node, line = root, root.start_mark.line + 1 if root is not None else None
    for key in path:
        if isinstance(node, yaml.MappingNode):
            found = [(k, v) for k, v in node.value if k.value == str(key)]
            if not found:
                break
            line, node = found[0][0].start_mark.line + 1, found[0][1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            break
    return line
