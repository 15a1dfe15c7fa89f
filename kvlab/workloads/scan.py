"""A compiled scanner of JSON lines whose values are whole numbers and one list of them (a Mooncake trace line):
one pass over a batch's bytes, no Python object per line or per number.

It takes a line only in the plain shape: an object of exactly the named fields, each once, in any order, every
value a JSON integer of at most 18 digits (the list field a list of them), ASCII field names without escapes,
JSON whitespace anywhere JSON allows it. Any other line (a float, an exponent, a string, a field missing, extra
or given twice, a longer number, anything malformed) is marked, and the caller reads it with a reader that knows
every case (``kvlab/workloads/traces.py``). So the scanner can change the speed, never the answer: what it takes, the
standard library's json reads as the same numbers.
"""

import numpy as np
from numba import njit

from kvlab.util.kernels import discard_damaged

discard_damaged(__file__)  # a damaged cache of this module's kernels compiles again, not fails

__all__ = ["BLANK", "OK", "OTHER", "scan"]

OK, BLANK, OTHER = 0, 1, 2  # per line: taken, blank (skipped), for the full reader
MAX_DIGITS = 18  # 10**18 - 1 < 2**63: any such number fits an int64


def scan(data, names, listed):
    """Scan the JSON lines in ``data`` (bytes, lines split by ``\\n``) for objects of the fields ``names``
    (a tuple of str), the one at index ``listed`` a list of integers, the others integers.

    Returns ``(status, values, counts, items)``: per line its status (OK, BLANK or OTHER), per line the
    integer fields in the order of ``names`` (the list field's column unused), per line its list's length,
    and the lists' items, line after line, of the OK lines only.
    """
    buffer = np.frombuffer(data, dtype=np.uint8)
    width = max(len(name) for name in names)
    keys = np.zeros((len(names), width), dtype=np.uint8)
    lengths = np.zeros(len(names), dtype=np.int64)
    for index, name in enumerate(names):
        encoded = name.encode("ascii")
        keys[index, : len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
        lengths[index] = len(encoded)
    lines = data.count(b"\n") + 1
    status = np.empty(lines, dtype=np.int8)
    values = np.zeros((lines, len(names)), dtype=np.int64)
    counts = np.zeros(lines, dtype=np.int64)
    items = np.empty(data.count(b",") + lines, dtype=np.int64)  # a line's list: at most its commas and one
    used = _scan(buffer, keys, lengths, listed, status, values, counts, items)
    return status, values, counts, items[:used].copy()


@njit(cache=True, inline="always")
def _space(byte):
    return byte == 32 or byte == 9 or byte == 10 or byte == 13  # JSON's whitespace


@njit(cache=True, inline="always")
def _skip(buffer, at, end):
    while at < end and _space(buffer[at]):
        at += 1
    return at


@njit(cache=True, inline="always")
def _integer(buffer, at, end):
    """``(value, next position)`` of the JSON integer at ``at``; the position is -1 where there is none that
    this scanner takes (no digits, a leading zero, a fraction, an exponent, more than MAX_DIGITS digits)."""
    negative = at < end and buffer[at] == 45  # -
    if negative:
        at += 1
    start, value = at, 0
    while at < end and 48 <= buffer[at] <= 57:
        value = value * 10 + (buffer[at] - 48)
        at += 1
    digits = at - start
    if digits == 0 or digits > MAX_DIGITS or (digits > 1 and buffer[start] == 48):
        return 0, -1
    if at < end and (buffer[at] == 46 or buffer[at] == 101 or buffer[at] == 69):  # . e E
        return 0, -1
    return (-value if negative else value), at


@njit(cache=True, inline="always")
def _field(buffer, at, end, keys, lengths):
    """``(index of the field name at the quote at ``at``, position after its closing quote)``; index -1 for a
    name that is not one of ``keys`` or not plain ASCII."""
    start = at + 1
    at = start
    while at < end and buffer[at] != 34:  # "
        if buffer[at] == 92 or buffer[at] < 32 or buffer[at] >= 128:  # an escape, a control byte, not ASCII
            return -1, -1
        at += 1
    if at >= end:
        return -1, -1
    size = at - start
    for index in range(len(lengths)):
        if lengths[index] == size:
            same = True
            for offset in range(size):
                if buffer[start + offset] != keys[index, offset]:
                    same = False
                    break
            if same:
                return index, at + 1
    return -1, -1


@njit(cache=True, inline="always")
def _blank(buffer, start, end):
    for at in range(start, end):
        byte = buffer[at]
        if not (byte == 32 or 9 <= byte <= 13):  # bytes.isspace: also \v and \f
            return False
    return True


@njit(cache=True, inline="always")
def _line(buffer, at, end, keys, lengths, listed, row, items, used):
    """The items used after the object in ``buffer[at:end]`` is scanned into ``row`` and ``items``; -1 where
    the line is not in the plain shape."""
    fields = len(lengths)
    seen = 0
    at = _skip(buffer, at, end)
    if at >= end or buffer[at] != 123:  # {
        return -1
    at = _skip(buffer, at + 1, end)
    while True:
        if at >= end or buffer[at] != 34:
            return -1
        index, at = _field(buffer, at, end, keys, lengths)
        if index < 0 or seen & (1 << index):
            return -1
        seen |= 1 << index
        at = _skip(buffer, at, end)
        if at >= end or buffer[at] != 58:  # :
            return -1
        at = _skip(buffer, at + 1, end)
        if index == listed:
            if at >= end or buffer[at] != 91:  # [
                return -1
            at = _skip(buffer, at + 1, end)
            count = 0
            if at < end and buffer[at] == 93:  # ]
                at += 1
            else:
                while True:
                    value, at = _integer(buffer, at, end)
                    if at < 0:
                        return -1
                    items[used + count] = value
                    count += 1
                    at = _skip(buffer, at, end)
                    if at < end and buffer[at] == 44:  # ,
                        at = _skip(buffer, at + 1, end)
                    elif at < end and buffer[at] == 93:
                        at += 1
                        break
                    else:
                        return -1
            row[index] = count
            used += count
        else:
            value, at = _integer(buffer, at, end)
            if at < 0:
                return -1
            row[index] = value
        at = _skip(buffer, at, end)
        if at < end and buffer[at] == 44:
            at = _skip(buffer, at + 1, end)
        elif at < end and buffer[at] == 125:  # }
            at = _skip(buffer, at + 1, end)
            break
        else:
            return -1
    if at != end or seen != (1 << fields) - 1:
        return -1
    return used


@njit(cache=True)
def _scan(buffer, keys, lengths, listed, status, values, counts, items):
    used, start, line = 0, 0, 0
    size = len(buffer)
    while line < len(status):
        end = start
        while end < size and buffer[end] != 10:  # \n
            end += 1
        if _blank(buffer, start, end):
            status[line] = BLANK
        else:
            after = _line(buffer, start, end, keys, lengths, listed, values[line], items, used)
            if after < 0:
                status[line] = OTHER
            else:
                status[line] = OK
                counts[line] = after - used
                used = after
        start = end + 1
        line += 1
    return used
