"""``python -m kvlab COMMAND``: the same as the ``kvlab`` console script."""

from kvlab.cli import entry

entry()
