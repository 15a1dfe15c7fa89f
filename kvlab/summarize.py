"""Summarize a per-request TTFT measurement (JSONL) into per-pass medians, means and baseline/lmcache ratios.

Usage: ``summarize.py IN.jsonl OUT.json``. Each non-blank line of IN is one request:
``{"config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms"}``. For each config
(``baseline``, ``lmcache``) and pass, ``n``, ``p50_ms`` (``statistics.median``) and ``mean_ms``
(``statistics.mean``) of ``ttft_ms``, rounded to 1 decimal; ``ratio`` is baseline / lmcache of the
unrounded statistics, rounded to 2 decimals. Passes are listed in sorted order, so the output
does not depend on the order of the lines.

Bad input (malformed JSON, a missing field, a non-numeric, negative or NaN ``ttft_ms``) is
reported as one line naming ``file:line``, with a nonzero exit, and OUT is left untouched: the
summary is written to a temporary file next to OUT and renamed over it only when complete.

Standard library only, so this file still works when copied alone.
"""

import argparse
import errno
import io
import json
import math
import os
import stat
import statistics
import sys
import tempfile

MAX_LINE_BYTES = 64 * 2**20  # a line longer than this is refused, not read into memory
CONFIGS = ("baseline", "lmcache")
FIELDS = ("config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms")
PROG = "summarize.py"


class InputError(ValueError):
    """Bad input; the message is the whole one-line explanation."""


def read_samples(path):
    """Return ``{config: {pass: [ttft_ms, ...]}}`` from the JSONL file at ``path``; raise InputError on bad input."""
    samples = {}
    for _, record in read_records(path):
        samples.setdefault(record["config"], {}).setdefault(record["pass"], []).append(record["ttft_ms"])
    return samples


class Prefixed(io.RawIOBase):
    """A named pipe's stream with the bytes read to find its writer put back in front."""

    def __init__(self, head, fd):
        self.head, self.fd = head, fd

    def readable(self):
        return True

    def readinto(self, buffer):
        if self.head:
            count = min(len(buffer), len(self.head))
            buffer[:count], self.head = self.head[:count], self.head[count:]
            return count
        return os.readv(self.fd, [buffer])

    def close(self):
        if not self.closed:
            os.close(self.fd)
        super().close()


def open_source(path):
    """``path`` opened for reading; a named pipe with no writer is an OSError at once, not a wait for ever."""
    if not stat.S_ISFIFO(os.stat(path).st_mode):
        return open(path, "rb")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        head = os.read(fd, 65536)
    except BlockingIOError:  # a writer, nothing written yet
        head = b""
    else:
        if not head:
            os.close(fd)
            raise OSError(errno.EPIPE, "a named pipe with no writer (nothing to read)")
    os.set_blocking(fd, True)
    return io.BufferedReader(Prefixed(head, fd))


def unique_fields(pairs):
    """A JSON object's fields, each given once (json would keep the last of two silently)."""
    record = dict(pairs)
    if len(record) != len(pairs):
        seen = set()
        twice = next(name for name, _ in pairs if name in seen or seen.add(name))
        raise ValueError(f"the field {twice!r} is given twice")
    return record


def read_records(path):
    """Yield ``(file:line, record)`` for each request of the JSONL file at ``path``; raise InputError on bad input."""
    try:
        handle = open_source(path)
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror}") from None
    with handle:
        number = 0
        while True:
            number += 1
            where = f"{path}:{number}"
            try:
                raw = handle.readline(MAX_LINE_BYTES + 1)
            except OSError as error:
                raise InputError(f"{where}: cannot read: {error.strerror}") from None
            if not raw:
                return
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(f"{where}: line longer than {MAX_LINE_BYTES} bytes")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"{where}: not UTF-8 text") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line, parse_constant=not_a_number, object_pairs_hook=unique_fields)
            except RecursionError:
                raise InputError(f"{where}: malformed JSON (nested too deeply)") from None
            except ValueError as error:  # JSONDecodeError, NaN/Infinity, or an integer too long to convert
                raise InputError(f"{where}: malformed JSON ({getattr(error, 'msg', error)})") from None
            if not isinstance(record, dict):
                raise InputError(f"{where}: expected a JSON object, got {type(record).__name__}")
            missing = [field for field in FIELDS if field not in record]
            if missing:
                raise InputError(f"{where}: missing field(s): {', '.join(missing)}")
            for field in ("config", "pass"):
                if not isinstance(record[field], str):
                    raise InputError(f"{where}: {field} must be a string, got {record[field]!r}")
            ttft = record["ttft_ms"]
            if isinstance(ttft, bool) or not isinstance(ttft, (int, float)):
                raise InputError(f"{where}: ttft_ms must be a number, got {ttft!r}")
            if not is_finite_non_negative(ttft):
                raise InputError(f"{where}: ttft_ms must be a finite number >= 0, got {ttft!r}")
            yield where, record


def not_a_number(name):
    """json's hook for NaN and Infinity: strict JSON has neither."""
    raise ValueError(f"{name} is not a number JSON allows")


def is_finite_non_negative(number):
    """True for 0 <= number < inf; False for NaN and for integers beyond the float range."""
    try:
        return math.isfinite(number) and number >= 0
    except OverflowError:
        return False


def describe(values):
    """The unrounded median and mean of one (config, pass) sample."""
    return statistics.median(values), statistics.mean(values)


def summarize(samples, warn=lambda message: None):
    """Fold ``{config: {pass: [ttft_ms]}}`` into the summary document (see the module docstring)."""
    stats = {config: {name: describe(values) for name, values in samples.get(config, {}).items()} for config in CONFIGS}
    for config in sorted(set(samples) - set(CONFIGS)):
        warn(f"ignoring config {config!r} (only {' and '.join(CONFIGS)} are summarized)")
    summary = {}
    for config in CONFIGS:
        if not stats[config]:
            warn(f"no {config} requests: its summary and the ratios are empty")
        summary[config] = {
            name: {"n": len(samples[config][name]), "p50_ms": float(round(p50, 1)), "mean_ms": float(round(mean, 1))}
            for name, (p50, mean) in sorted(stats[config].items())
        }
    baseline, lmcache = stats["baseline"], stats["lmcache"]
    ratio = {}
    if baseline and lmcache:
        for name in sorted(set(baseline) ^ set(lmcache)):
            warn(f"pass {name!r} is not in both configs: no ratio for it")
        for name in sorted(set(baseline) & set(lmcache)):
            ratio[name] = {
                "p50": quotient(baseline[name][0], lmcache[name][0], name, "p50", warn),
                "mean": quotient(baseline[name][1], lmcache[name][1], name, "mean", warn),
            }
    summary["ratio"] = ratio
    return summary


def quotient(numerator, denominator, name, statistic, warn):
    """baseline / lmcache rounded to 2 decimals; None (JSON null) when the lmcache statistic is 0."""
    if denominator == 0:
        warn(f"pass {name!r}: lmcache {statistic} is 0, ratio is null")
        return None
    return float(round(numerator / denominator, 2))


def write_atomically(path, text):
    """Write ``text`` (or bytes) to ``path`` through a temporary file in the same folder, so ``path`` is never
    partial."""
    if os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path)):  # a device, a pipe
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        try:  # written in place (a rename would replace the device itself); a pipe with no reader is an error
            fd = os.open(path, os.O_WRONLY | (os.O_NONBLOCK if stat.S_ISFIFO(os.stat(path).st_mode) else 0))
        except OSError as error:
            if error.errno == errno.ENXIO:
                raise OSError(errno.ENXIO, "a named pipe with no reader") from None
            raise
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return
    path = os.path.realpath(path)  # a link is written through: its target is replaced, the link stays
    folder = os.path.dirname(path)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".summarize-", suffix=".tmp")
    mask = os.umask(0)  # the mode any new file gets, not mkstemp's 0600; a replaced one keeps its own, as with ">"
    os.umask(mask)
    mode = stat.S_IMODE(os.stat(path).st_mode) & 0o777 if os.path.isfile(path) else 0o666 & ~mask
    try:
        if isinstance(text, bytes):
            handle = os.fdopen(fd, "wb")
        else:
            handle = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        with handle:
            handle.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are a single line on stderr (exit 2), without the usage block."""

    def error(self, message):
        one_line = message.replace("\n", "\\n")  # a bad argument may itself contain a newline
        self.exit(2, f"{self.prog}: error: {one_line}\n")


def main(argv=None, prog=PROG):
    parser = OneLineParser(prog=prog, description="Summarize a per-request TTFT measurement (JSONL) into JSON.")
    parser.add_argument("source", metavar="IN.jsonl", help="the measurement, one JSON object per line")
    parser.add_argument("target", metavar="OUT.json", help="the summary; written only when IN is valid")
    args = parser.parse_args(argv)
    source, target = args.source, args.target

    warnings = []  # shown only when the summary is written, so an error stays the one line on stderr
    if os.path.exists(target) and os.path.exists(source) and os.path.samefile(source, target):
        parser.error(f"{target} is both the input and the output")
    try:
        summary = summarize(read_samples(source), warnings.append)
        if not os.path.isdir(os.path.dirname(os.path.abspath(target))):
            raise InputError(f"{target}: output folder does not exist")
        try:
            text = json.dumps(summary, indent=2, allow_nan=False) + "\n"
        except ValueError:
            raise InputError(f"{source}: a statistic or ratio overflows (ttft_ms values too large)") from None
        write_atomically(target, text)
    except InputError as error:
        sys.stderr.write(f"{prog}: error: {error}\n")
        return 1
    except OSError as error:
        sys.stderr.write(f"{prog}: error: {target}: cannot write: {error.strerror}\n")
        return 1
    sys.stderr.writelines(f"{prog}: warning: {message}\n" for message in warnings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
