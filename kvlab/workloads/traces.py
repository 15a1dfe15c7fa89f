"""Trace formats at block granularity, one reader each (libCacheSim's pattern: a reader per format), read in
batches into typed arrays: per request its label (the timestamp), prompt tokens and number of blocks, and the
hash ids of all its blocks in one int64 array.

Two fast paths: a format whose fields are all numbers (Mooncake) is read a batch at a time by a compiled scanner
(:mod:`kvlab.workloads.scan`) when every line of the batch is in the plain shape; otherwise simdjson (pysimdjson) parses
each line and takes ``hash_ids`` as an int64 buffer, never as Python ints, and the other fields are checked a
batch at a time. A line the fast paths do not take as it is (an unusual shape, extra fields, a bad value) is
read again by the reference reader (the standard library's json, :meth:`TraceFormat.check`), which either
accepts it with the same values or stops with ``file:line: what is wrong``. The fast paths change the speed,
never the answer.
"""

from dataclasses import dataclass
from typing import NamedTuple

from kvlab.util.files import BATCH_BYTES, InputError, line_batches, lines, parse_json, shown, unique_fields
from kvlab.util.numbers import MAX_WHOLE

__all__ = ["BAILIAN", "FORMATS", "MAX_WHOLE", "MOONCAKE", "Batch", "TraceError", "TraceFormat", "read"]


ID_RANGE = (-(2**63), 2**63 - 1)  # a hash id is an int64


class TraceError(ValueError):
    """A bad trace line; the message is the whole one-line explanation, naming ``file:line``."""


class Batch(NamedTuple):
    """Consecutive requests of a trace: per request a label, its tokens and block count; all blocks' ids (numpy
    arrays; numpy, like the parser, is imported by the readers, not by the formats)."""

    labels: object  # int64 where every timestamp is a whole number, else float64
    tokens: object  # int64
    counts: object  # int64: blocks per request
    ids: object  # int64: the hash ids of every request's blocks, request after request
    fraction: float | None  # of the file read so far (None: unknown, standard input)
    outputs: object = None  # int64: per request its output_length, where the format has one


@dataclass(frozen=True)
class Field:
    """A field every line must have: a whole number from ``low`` to ``high`` (with ``decimal``, any number in
    that range), or with ``low`` None a string."""

    name: str
    low: int | None = 0
    high: int = MAX_WHOLE
    decimal: bool = False

    @property
    def types(self):
        return (str,) if self.low is None else (int, float) if self.decimal else (int,)

    @property
    def wanted(self):
        if self.low is None:
            return "a string"
        return f"a {'number' if self.decimal else 'whole number'} from {self.low} to {self.high}"

    def ok(self, value):
        return type(value) in self.types and (self.low is None or self.low <= value <= self.high)  # NaN: False

    def suspects(self, column):
        """Per value, whether it may be wrong (checked exactly by :meth:`ok` then): one numpy pass per batch."""
        import numpy as np

        kinds = set(map(type, column))
        if len(kinds) == 1 and kinds <= {int, float} and kinds <= set(self.types):
            try:
                values = np.array(column, dtype=kinds.pop())
            except OverflowError:  # a whole number beyond 64 bits
                return np.ones(len(column), dtype=bool)
            return ~((values >= self.low) & (values <= self.high))
        if kinds == {str} and self.low is None:
            return np.zeros(len(column), dtype=bool)
        return np.fromiter((not self.ok(value) for value in column), dtype=bool, count=len(column))


TIMESTAMP = Field("timestamp", decimal=True)
INPUT_LENGTH = Field("input_length")


@dataclass(frozen=True)
class TraceFormat:
    """A JSONL trace of requests with ``timestamp``, ``input_length``, the ``hash_ids`` of ``block_tokens``-token
    blocks, and the ``fields`` of its own that a line must also have."""

    name: str
    title: str  # as people write it
    block_tokens: int
    fields: tuple[Field, ...]
    seconds: float = 1.0  # one unit of its timestamps, in seconds

    @property
    def output_column(self):
        """The index of ``output_length`` among :attr:`scalars`, or None where the format has none."""
        names = [field.name for field in self.scalars]
        return names.index("output_length") if "output_length" in names else None

    @property
    def integers(self):
        """Whether every field is a number (so that :mod:`kvlab.workloads.scan` can read its plain lines)."""
        return all(field.low is not None for field in self.fields)

    @property
    def scalars(self):
        """Every field but hash_ids, the label and the tokens first."""
        return (TIMESTAMP, INPUT_LENGTH, *self.fields)

    def check(self, raw, where, every=False):
        """The reference reader of one line: ``(timestamp, input_length, hash_ids)`` (with ``every``: the values of
        all :attr:`scalars`, then ``hash_ids``), or TraceError."""
        try:
            record = parse_json(raw, where, pairs=unique_fields)
        except ValueError as error:
            raise TraceError(str(error)) from None
        if type(record) is not dict:
            raise TraceError(f"{where}: expected a JSON object, got {type(record).__name__}")
        missing = [field.name for field in self.scalars if field.name not in record]
        missing += ["hash_ids"] if "hash_ids" not in record else []
        if missing:
            raise TraceError(f"{where}: missing field(s): {', '.join(missing)}")
        for field in self.scalars:
            if not field.ok(record[field.name]):
                raise TraceError(f"{where}: {field.name} must be {field.wanted}, got {shown(record[field.name])}")
        ids = record["hash_ids"]
        if type(ids) is not list or not all(type(block) is int for block in ids):
            raise TraceError(f"{where}: hash_ids must be a list of whole numbers")
        if ids and not (ID_RANGE[0] <= min(ids) and max(ids) <= ID_RANGE[1]):
            raise TraceError(f"{where}: hash_ids must be 64-bit, from {ID_RANGE[0]} to {ID_RANGE[1]}")
        tokens = record["input_length"]
        blocks = -(-tokens // self.block_tokens)
        if len(ids) != blocks:
            raise TraceError(
                f"{where}: {len(ids)} hash_ids, but input_length {tokens} makes {blocks}"
                f" blocks of {self.block_tokens} tokens"
            )
        if every:
            return tuple(record[field.name] for field in self.scalars), ids
        return record["timestamp"], tokens, ids


MOONCAKE = TraceFormat("mooncake", "Mooncake", 512, (Field("output_length"),), seconds=1e-3)
"""Mooncake (FAST'25): ``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids`` of 512-token blocks."""

BAILIAN = TraceFormat(
    "bailian",
    "Qwen-Bailian",
    16,
    (
        Field("chat_id"),
        Field("parent_chat_id", low=-1),  # -1: the first turn of a conversation
        Field("output_length"),
        Field("type", low=None),
        Field("turn"),
    ),
)
"""Qwen-Bailian (Alibaba, USENIX ATC'25, ``qwen_*_blksz_16.jsonl``): ``chat_id``, ``parent_chat_id``,
``timestamp`` in seconds, ``input_length``, ``output_length``, ``type``, ``turn``, ``hash_ids`` of 16-token blocks."""

FORMATS = {trace.name: trace for trace in (MOONCAKE, BAILIAN)}


BOM = b"\xef\xbb\xbf"
NO_BOM = "malformed JSON (a UTF-8 byte order mark before the first line)"  # as every other JSON reader, and json


def no_bom(path, first):
    """TraceError when the file's first line starts with a UTF-8 byte order mark."""
    if first.startswith(BOM):
        raise TraceError(f"{path}:1: {NO_BOM}")


def check_head(path, trace, count=16):
    """The first ``count`` requests of the trace read by the reference reader (no compiled code to load): a file
    that is not a trace of ``trace``'s format is a TraceError naming its line."""
    try:
        for number, raw in lines(path):
            if number == 1:
                no_bom(path, raw)
            if raw.strip():
                trace.check(raw, f"{path}:{number}")
                count -= 1
                if not count:
                    return
    except InputError as error:
        raise TraceError(str(error)) from None


def read(path, trace, size=BATCH_BYTES):
    """Yield the :class:`Batch` es of the trace in ``path`` (a path, ``-`` or ``.gz``) in format ``trace``."""
    import simdjson  # the fast parser, loaded only by a command that reads a trace

    parser = simdjson.Parser()
    try:
        for first, raws, fraction in line_batches(path, size):
            if first == 1:
                no_bom(path, raws[0])
            batch = _scanned(trace, raws) if trace.integers else None
            if batch is None:
                batch = _batch(path, trace, parser, first, raws)
            yield batch._replace(fraction=fraction)
    except InputError as error:  # unreadable, a line too long
        raise TraceError(str(error)) from None


def _scanned(trace, raws):
    """The batch as the compiled scanner reads it, or None where any line needs a closer look (a shape it does
    not take, a value out of range, blocks that do not match the tokens): then the whole batch is read by
    :func:`_batch`, which names the first bad line."""

    from kvlab.workloads.scan import OK, OTHER, scan

    names = (*(field.name for field in trace.scalars), "hash_ids")
    status, values, counts, ids = scan(b"\n".join(raws), names, len(names) - 1)
    if len(status) != len(raws) or (status == OTHER).any():
        return None
    taken = status == OK
    values, counts = values[taken], counts[taken]
    for column, field in enumerate(trace.scalars):
        if ((values[:, column] < field.low) | (values[:, column] > field.high)).any():
            return None
    tokens = values[:, 1].copy()
    if (-(-tokens // trace.block_tokens) != counts).any():
        return None
    output = trace.output_column
    outputs = None if output is None else values[:, output].copy()
    return Batch(values[:, 0].copy(), tokens, counts, ids, None, outputs)


class _Slow(Exception):
    """This line needs the reference reader."""


def _batch(path, trace, parser, first, raws):
    """One batch of lines, fast where it can be; the first bad line raises TraceError naming it."""
    import numpy as np

    parse = parser.parse
    names = tuple(field.name for field in trace.scalars)
    fields = len(names) + 1
    rows, buffers, numbers = [], [], []
    failed = None  # (index, error) of a line the reference reader refused
    for index, raw in enumerate(raws):
        if not raw or raw.isspace():
            continue
        record = None
        try:
            if raw.count(b"[") != 1:  # a nested list would flatten into the buffer
                raise _Slow
            record = parse(raw)
            if len(record) != fields:  # a field missing, given twice or extra
                raise _Slow
            row = tuple(map(record.__getitem__, names))
            ids = record["hash_ids"].as_buffer(of_type="i")
        except (_Slow, ValueError, TypeError, RuntimeError, KeyError, AttributeError):
            record = None  # the parser is reused only once its last document is gone
            try:
                row, ids = trace.check(raw, f"{path}:{first + index}", every=True)
            except TraceError as error:
                failed = index, error
                break
            ids = np.array(ids, dtype=np.int64).tobytes()
        record = None
        rows.append(row)
        buffers.append(ids)
        numbers.append(index)
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    counts = np.fromiter(map(len, map(memoryview, buffers)), dtype=np.int64, count=len(buffers)) // 8  # bytes
    suspect = np.zeros(len(rows), dtype=bool)
    for field, column in zip(trace.scalars, columns, strict=True):
        suspect |= field.suspects(column)
    try:
        tokens = np.array(columns[1], dtype=np.int64)
        suspect |= -(-tokens // trace.block_tokens) != counts
    except (OverflowError, TypeError, ValueError):
        pass  # a bad input_length: a suspect already
    for row in np.flatnonzero(suspect):
        index = numbers[row]
        if failed is not None and failed[0] < index:
            break
        trace.check(raws[index], f"{path}:{first + index}")  # raises: the first bad line
    if failed is not None:
        raise failed[1]
    labels = np.array(columns[0]) if rows else np.zeros(0, dtype=np.int64)
    output = trace.output_column
    return Batch(
        labels.astype(np.float64 if labels.dtype.kind == "f" else np.int64),
        tokens,
        counts,
        np.frombuffer(b"".join(buffers), dtype=np.int64),
        None,
        None if output is None else np.array(columns[output], dtype=np.int64),
    )
