"""Deterministic, atomic output files for the pipeline: a reader never sees a partial file."""

import json

from kvlab.summarize import write_atomically

__all__ = ["dump_json", "write_atomically", "write_json"]


def dump_json(document):
    """The one JSON layout of every artifact: indent 2, insertion key order, trailing newline."""
    return json.dumps(document, indent=2) + "\n"


def write_json(path, document):
    """Write ``document`` to ``path`` atomically in the artifact layout."""
    write_atomically(path, dump_json(document))
