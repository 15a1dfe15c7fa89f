"""Deterministic, atomic output files for the pipeline: a reader never sees a partial file."""

import json
import os
import tempfile

from kvlab.summarize import write_atomically

__all__ = ["dump_json", "write_atomically", "write_json", "write_together"]


def dump_json(document):
    """The one JSON layout of every artifact: indent 2, insertion key order, trailing newline."""
    return json.dumps(document, indent=2) + "\n"


def write_json(path, document):
    """Write ``document`` to ``path`` atomically in the artifact layout."""
    write_atomically(path, dump_json(document))


def write_together(texts):
    """Write ``{path: text}`` so that either every file is replaced or none is: all go to temporary files
    first. An OSError names the file it failed on (``error.filename``)."""
    written = []
    try:
        for path, text in texts.items():
            fd, temporary = tempfile.mkstemp(
                dir=os.path.dirname(os.path.abspath(path)), prefix=".kvlab-", suffix=".tmp"
            )
            written.append((temporary, path))
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)
    except OSError as error:
        for temporary, _ in written:
            os.unlink(temporary)
        raise OSError(error.errno, error.strerror, path) from None
    except BaseException:
        for temporary, _ in written:
            os.unlink(temporary)
        raise
    for temporary, path in written:
        os.replace(temporary, path)
