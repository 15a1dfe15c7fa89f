"""The user's own trace (``--workload requests --trace FILE``): one request a line, JSONL or CSV.

Fields (docs/replay.md, "Your own trace"): ``timestamp`` (a number >= 0 in the unit ``--timestamp-unit``
declares: s, ms or us), ``input_length``, ``output_length``, an optional ``request_id`` (a string or a whole
number), and the prompt as either ``prompt_token_ids`` (``input_length`` whole numbers) or ``hash_ids`` (one per
block of ``--hash-block-tokens`` tokens, the last perhaps partial). A CSV file has a header naming its columns; a
list cell is whole numbers apart by spaces, or a JSON list. A ``.gz`` file is read compressed, ``-`` is standard
input.

A block's key stands for its whole prefix, as a prefix cache's hash does (vLLM ``vllm/v1/core/kv_cache_utils.py``,
``hash_block_tokens``: a block's hash is the hash of its parent's and its own tokens): prompt token ids are cut
into blocks of ``--block-tokens`` and each key is a 64-bit BLAKE2b digest of its parent's key and its tokens;
``hash_ids`` declared ``--hash-chaining per-block`` (a hash of each block's own tokens) are chained the same way,
so a block is only ever reused after the same prefix; ``chained`` ones (each already a hash of its prefix, as
Mooncake's and Bailian's) are taken as they are. Two different prefixes share a key only when 64-bit digests
collide (about one pair in 10**19 for a billion blocks). The reader is Python line by line: the conversation
trace converted (12,031 requests, 24 blocks each on average) reads in 0.6 s of CPU, about 20,000 requests a second.
"""

import csv
import hashlib
import json
import struct
from typing import NamedTuple

from kvlab.util.files import BATCH_BYTES, InputError, line_batches, number_text, parse_json, shown, unique_fields
from kvlab.util.numbers import MAX_WHOLE
from kvlab.workloads.traces import BOM, ID_RANGE, NO_BOM, Batch, TraceError

__all__ = ["FIELDS", "RequestTrace", "check_head", "convert", "is_csv", "read_requests", "stats"]

PROMPTS = ("prompt_token_ids", "hash_ids")
FIELDS = ("timestamp", "input_length", "output_length", "request_id", *PROMPTS)
ROOT = b"kvlab-requests"  # the parent of a prompt's first block


class RequestTrace(NamedTuple):
    """How to key a trace's requests: the blocks token ids are cut into, and for ``hash_ids`` their block and
    chaining (0 and "" when undeclared)."""

    block_tokens: int
    hash_block_tokens: int = 0
    hash_chaining: str = ""


def _digest(parent, content):
    return hashlib.blake2b(parent + content, digest_size=8).digest()


def _key(digest):
    return int.from_bytes(digest, "little", signed=True)


def _whole(value, low=0, high=MAX_WHOLE):
    return type(value) is int and low <= value <= high


def _number(value):
    return type(value) in (int, float) and 0 <= value <= MAX_WHOLE  # NaN and infinities fail


def check_record(record, where, trace):
    """``(timestamp, input_length, output_length, request_id, keys)`` of one request, or TraceError naming
    ``where``."""
    if type(record) is not dict:
        raise TraceError(f"{where}: expected a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - set(FIELDS))
    if unknown:
        raise TraceError(f"{where}: unknown field {shown(unknown[0])} (the fields: {', '.join(FIELDS)})")
    missing = [name for name in ("timestamp", "input_length", "output_length") if name not in record]
    if missing:
        raise TraceError(f"{where}: missing field(s): {', '.join(missing)}")
    prompts = [name for name in PROMPTS if name in record]
    if len(prompts) != 1:
        raise TraceError(f"{where}: a request has its prompt as prompt_token_ids or as hash_ids (one of them)")
    timestamp, tokens, output = record["timestamp"], record["input_length"], record["output_length"]
    if not _number(timestamp):
        raise TraceError(f"{where}: timestamp must be a number from 0 to {MAX_WHOLE}, got {shown(timestamp)}")
    for name, value in (("input_length", tokens), ("output_length", output)):
        if not _whole(value):
            raise TraceError(f"{where}: {name} must be a whole number from 0 to {MAX_WHOLE}, got {shown(value)}")
    request_id = record.get("request_id")
    if request_id is not None and not (type(request_id) is str or _whole(request_id, *ID_RANGE)):
        raise TraceError(f"{where}: request_id must be a string or a whole number, got {shown(request_id)}")
    values = record[prompts[0]]
    if type(values) is not list or not all(type(value) is int for value in values):
        raise TraceError(f"{where}: {prompts[0]} must be a list of whole numbers")
    if values and not (ID_RANGE[0] <= min(values) and max(values) <= ID_RANGE[1]):
        raise TraceError(f"{where}: {prompts[0]} must be 64-bit, from {ID_RANGE[0]} to {ID_RANGE[1]}")
    if prompts[0] == "prompt_token_ids":
        if len(values) != tokens:
            raise TraceError(f"{where}: {len(values)} prompt_token_ids, but input_length is {tokens}")
        keys = _token_keys(values, trace.block_tokens)
    else:
        if not trace.hash_block_tokens or not trace.hash_chaining:
            raise TraceError(
                f"{where}: hash_ids need their block and their chaining declared:"
                " --hash-block-tokens N and --hash-chaining chained|per-block"
            )
        blocks = -(-tokens // trace.hash_block_tokens)
        if len(values) != blocks:
            raise TraceError(
                f"{where}: {len(values)} hash_ids, but input_length {tokens} makes {blocks}"
                f" blocks of {trace.hash_block_tokens} tokens"
            )
        keys = values if trace.hash_chaining == "chained" else _chained(values)
    return timestamp, tokens, output, request_id, keys


def _token_keys(tokens, block):
    """The chained keys of the prompt's blocks of ``block`` tokens (the last perhaps partial)."""
    keys, parent = [], ROOT
    for start in range(0, len(tokens), block):
        chunk = tokens[start : start + block]
        parent = _digest(parent, struct.pack(f"<{len(chunk)}q", *chunk))
        keys.append(_key(parent))
    return keys


def _chained(ids):
    """Per-block hashes chained: each key a digest of its parent's key and its own hash."""
    keys, parent = [], ROOT
    for block in ids:
        parent = _digest(parent, block.to_bytes(8, "little", signed=True))
        keys.append(_key(parent))
    return keys


def _csv_value(name, text, where):
    """One CSV cell as the JSON value it stands for."""
    text = text.strip()
    if name == "request_id":
        return None if not text else int(text) if _integer_text(text) else text
    if name in PROMPTS:
        if text.startswith("["):
            try:
                return json.loads(text)
            except ValueError:
                raise TraceError(f"{where}: {name} must be a list of whole numbers") from None
        parts = text.split()
        if not all(map(_integer_text, parts)):
            raise TraceError(f"{where}: {name} must be whole numbers apart by spaces, or a JSON list")
        return [int(part) for part in parts]
    if _integer_text(text):
        return int(text)
    if number_text(text):
        return float(text)
    raise TraceError(f"{where}: {name} must be a number in ASCII digits, got {shown(text)}")


def _integer_text(text):
    """A whole number as JSON writes one (:func:`kvlab.util.files.number_text`: Python's ``int`` also takes ``1_0``
    and other scripts' digits), of at most 40 digits."""
    return number_text(text, whole=True) and len(text.lstrip("+-")) <= 40


def is_csv(path):
    """Whether a trace named ``path`` is read as CSV (else JSONL)."""
    return str(path).removesuffix(".gz").endswith(".csv")


def _records(path, size):
    """Yield ``(first line number, [(line number, record)], fraction)`` per batch of lines: JSON objects, or a
    CSV file's rows as objects (a ``.csv`` or ``.csv.gz`` name)."""
    comma = is_csv(path)
    header = None
    for first, raws, fraction in line_batches(path, size):
        records = []
        for offset, raw in enumerate(raws):
            number, where = first + offset, f"{path}:{first + offset}"
            if not raw.strip():
                continue
            if number == 1 and raw.startswith(BOM):
                if not comma:  # as every JSON reader; a spreadsheet's CSV often starts with one
                    raise TraceError(f"{where}: {NO_BOM}")
                raw = raw[len(BOM) :]
            if not comma:
                try:
                    records.append((number, parse_json(raw, where, pairs=unique_fields)))
                except ValueError as error:
                    raise TraceError(str(error)) from None
                continue
            try:
                cells = next(csv.reader([raw.decode("utf-8")]))
            except (UnicodeDecodeError, csv.Error) as error:
                raise TraceError(f"{where}: not a line of CSV ({error})") from None
            if header is None:
                header = [cell.strip() for cell in cells]
                unknown = sorted(set(header) - set(FIELDS))
                if unknown or len(set(header)) != len(header):
                    what = f"unknown column {shown(unknown[0])}" if unknown else "a column named twice"
                    raise TraceError(f"{where}: the header has {what} (the columns: {', '.join(FIELDS)})")
                continue
            if len(cells) != len(header):
                raise TraceError(f"{where}: {len(cells)} cells, but the header names {len(header)} columns")
            record = {column: _csv_value(column, cell, where) for column, cell in zip(header, cells, strict=True)}
            if record.get("request_id", 0) is None:
                del record["request_id"]
            records.append((number, record))
        yield first, records, fraction


def check_head(path, trace, count=16):
    """The first ``count`` requests of the trace in ``path`` checked as :func:`read_requests` checks them (the config
    check's look at a trace before any job reads it): TraceError naming the first bad line."""
    try:
        for _, records, _ in _records(path, 1 << 16):
            for number, record in records[:count]:
                check_record(record, f"{path}:{number}", trace)
            count -= len(records)
            if count <= 0:
                return
    except InputError as error:  # unreadable, a line too long
        raise TraceError(str(error)) from None


def read_requests(path, trace, size=BATCH_BYTES):
    """Yield ``(Batch, request ids)`` per batch of the trace in ``path``: the :class:`Batch` of
    :mod:`kvlab.workloads.traces` (keys chained as the module says), and each request's ``request_id`` (None where
    it has none)."""
    import numpy as np

    try:
        for _, records, fraction in _records(path, size):
            rows = [check_record(record, f"{path}:{number}", trace) for number, record in records]
            labels = [row[0] for row in rows]
            whole = all(type(label) is int for label in labels)
            batch = Batch(
                np.array(labels, dtype=np.int64 if whole else np.float64),
                np.array([row[1] for row in rows], dtype=np.int64),
                np.array([len(row[4]) for row in rows], dtype=np.int64),
                np.array([key for row in rows for key in row[4]], dtype=np.int64),
                fraction,
                np.array([row[2] for row in rows], dtype=np.int64),
            )
            yield batch, [row[3] for row in rows]
    except InputError as error:  # unreadable, a line too long
        raise TraceError(str(error)) from None


def stats(workload):
    """A trace's figures at block granularity (Mooncake's Table 2: requests, blocks, and the share of blocks
    reused at unlimited room, 36.64% for the conversation trace at 512 tokens): ``requests``, ``input_tokens``,
    ``block_accesses``, ``distinct_blocks`` and ``reused_block_share`` (1 - distinct / accesses)."""
    requests = tokens = accesses = 0
    distinct = -1
    for columns in workload.batches():
        requests += len(columns.counts)
        tokens += int(columns.tokens.sum())
        accesses += len(columns.keys)
        if len(columns.keys):
            distinct = max(distinct, int(columns.keys.max()))  # dense keys: the largest so far + 1 are distinct
    distinct += 1
    return {
        "workload": workload.describe(),
        "block_tokens": workload.block_tokens,
        "requests": requests,
        "input_tokens": tokens,
        "block_accesses": accesses,
        "distinct_blocks": distinct,
        "reused_block_share": round(1 - distinct / accesses, 6) if accesses else None,
    }


def convert(workload, to):
    """Yield the trace's lines in format ``to``: ``requests`` (this module's JSONL: timestamps in seconds,
    ``hash_ids`` chained, one per block of the workload's ``--block-tokens``, and the request ids where the source
    has them) or ``mooncake`` (timestamps in ms, 512-token blocks). Block ids are dense, from 0, in order of first
    appearance."""
    from kvlab.util.errors import SettingError

    if to == "mooncake" and workload.block_tokens != 512:
        raise SettingError(
            f"--to mooncake: Mooncake's blocks are 512 tokens, and the workload's are {workload.block_tokens}"
            " (--block-tokens, or the source's default): give --block-tokens 512"
        )
    number = 0
    for columns, outputs in workload.dense_columns():
        keys = columns.keys.tolist()
        start = 0
        ids = workload.request_ids()
        rows = zip(columns.labels.tolist(), columns.tokens.tolist(), columns.counts.tolist(), outputs, strict=True)
        for label, tokens, count, output in rows:
            record = {}
            if to == "requests" and ids is not None and ids[number] is not None:
                record["request_id"] = ids[number]
            time = label * workload.seconds * (1000 if to == "mooncake" else 1)
            record["timestamp"] = int(time) if float(time).is_integer() else round(time, 9)
            record["input_length"] = tokens
            record["output_length"] = output if output is not None else 0
            record["hash_ids"] = keys[start : start + count]
            start += count
            number += 1
            yield json.dumps(record, separators=(", ", ": ")) + "\n"
