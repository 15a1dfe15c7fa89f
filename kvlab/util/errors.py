"""The errors kvlab's functions raise for bad input, defined below every layer so that the commands (which turn
them into one line and an exit code) and the Python API (which raises them) share them without importing each
other's code."""

import re

__all__ = ["KvlabError", "SettingError", "describe", "printable"]


class KvlabError(ValueError):
    """Bad input (data, a file): the message is the one line the command prints; ``status`` its exit code."""

    status = 1


class SettingError(KvlabError):
    """A setting the command refuses (a bad value, settings that do not go together): its exit code is 2."""

    status = 2


def describe(error, outputs=()):
    """One line for an error of the domain or the system, as the commands and the Python API say it (``outputs``:
    the files being written; any other file named was being read)."""
    from kvlab.util.files import shown

    if isinstance(error, OSError):
        if not error.filename:
            return f"cannot read or write: {error.strerror or error}"
        verb = "write" if error.filename in outputs else "read"
        return f"{error.filename}: cannot {verb}: {error.strerror or error}"
    if isinstance(error, RecursionError):
        return "an input is nested too deeply"
    if isinstance(error, MemoryError):
        return "out of memory"
    if isinstance(error, LookupError | TypeError):  # an input of the wrong shape reached the domain code
        return f"an input has the wrong shape ({type(error).__name__}: {shown(error, 200)})"
    return printable(str(error) or type(error).__name__)


UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text):
    """``text`` as one line a terminal shows as written: control characters (a newline, an escape sequence's ESC)
    and the marks that reorder text (a right-to-left override) escaped as Python writes them."""
    return UNPRINTABLE.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)
