"""A TTFT measurement in the lab's schema: its records read, and summarized per config and pass.

Each non-blank line of the JSONL file is one request: ``{"config", "pass", "doc", "doc_tokens", "ttft_ms",
"total_ms"}``. It is read and summarized exactly as the lab's script ``kvlab/summarize.py`` does (the same
records, the same one-line errors naming ``file:line``, the same summary: a test holds the two together), so
that what the fit and the figures read is what ``kvlab summarize`` reads; the lab's script stays standard-library
only and whole for its own users, and kvlab's code reads through :mod:`kvlab.util.files`.
"""

import json
import math
import statistics

from kvlab.util.files import MAX_LINE_BYTES, InputError, is_fifo, no_constant, open_pipe, unique_fields

__all__ = ["CONFIGS", "FIELDS", "describe", "read_records", "read_samples", "summary"]

CONFIGS = ("baseline", "lmcache")  # the configs summarized, and the ratio's numerator and denominator
FIELDS = ("config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms")
TWICE = "the field {!r} is given twice"  # as summarize.py says it


def open_measurement(path):
    """``path`` opened as the lab's script opens it: the file of that name (``-`` is a file named so, a ``.gz`` file
    is read as it is), a named pipe with no writer an error at once."""
    try:
        return open_pipe(path) if is_fifo(path) else open(path, "rb")
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror}") from None


def read_records(path):
    """Yield ``(file:line, record)`` for each request of the measurement at ``path``; InputError (one line naming
    ``file:line``) on bad input: a line too long, not UTF-8, not strict JSON, not an object, a field missing or
    given twice, a config or pass not a string, a ``ttft_ms`` not a finite number >= 0."""
    with open_measurement(path) as handle:
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
            yield where, checked(parsed(line, where), where)


def parsed(line, where):
    """One line's JSON value: strict JSON (no NaN, no Infinity), each object's fields given once."""
    try:
        return json.loads(line, parse_constant=no_constant, object_pairs_hook=lambda pairs: unique_fields(pairs, TWICE))
    except RecursionError:
        raise InputError(f"{where}: malformed JSON (nested too deeply)") from None
    except ValueError as error:  # JSONDecodeError, NaN/Infinity, a field twice, an integer too long to convert
        raise InputError(f"{where}: malformed JSON ({getattr(error, 'msg', error)})") from None


def checked(record, where):
    """The record, if it is one of the schema's."""
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
    if not finite_non_negative(ttft):
        raise InputError(f"{where}: ttft_ms must be a finite number >= 0, got {ttft!r}")
    return record


def finite_non_negative(number):
    """True for 0 <= number < inf; False for NaN and for integers beyond the float range."""
    try:
        return math.isfinite(number) and number >= 0
    except OverflowError:
        return False


def read_samples(path):
    """``{config: {pass: [ttft_ms, ...]}}`` of the measurement at ``path``, in the order read."""
    samples = {}
    for _, record in read_records(path):
        samples.setdefault(record["config"], {}).setdefault(record["pass"], []).append(record["ttft_ms"])
    return samples


def describe(values):
    """The unrounded median and mean of one (config, pass) sample."""
    return statistics.median(values), statistics.mean(values)


def summary(samples, warn=lambda message: None):
    """The summary document of ``{config: {pass: [ttft_ms]}}``: per config of :data:`CONFIGS` and pass (sorted)
    ``n``, ``p50_ms`` and ``mean_ms`` rounded to 1 decimal; per pass of both, ``ratio`` baseline / lmcache of the
    unrounded p50 and mean, rounded to 2 decimals (None where lmcache's is 0). ``warn`` is told what is left out."""
    stats = {config: {name: describe(values) for name, values in samples.get(config, {}).items()} for config in CONFIGS}
    for config in sorted(set(samples) - set(CONFIGS)):
        warn(f"ignoring config {config!r} (only {' and '.join(CONFIGS)} are summarized)")
    document = {}
    for config in CONFIGS:
        if not stats[config]:
            warn(f"no {config} requests: its summary and the ratios are empty")
        document[config] = {
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
    document["ratio"] = ratio
    return document


def quotient(numerator, denominator, name, statistic, warn):
    """baseline / lmcache rounded to 2 decimals; None (JSON null) when the lmcache statistic is 0."""
    if denominator == 0:
        warn(f"pass {name!r}: lmcache {statistic} is 0, ratio is null")
        return None
    return float(round(numerator / denominator, 2))
