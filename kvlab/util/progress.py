"""A progress bar on stderr for work longer than a second (a replay's requests, a grid's points): shown on a
terminal only, so that it never reaches stdout, a log file or a pipe."""

import os
import sys

__all__ = ["DELAY", "progress_bar"]

DELAY = "KVLAB_PROGRESS_DELAY"  # seconds before a bar shows (default 1: a quick command shows none)


def progress_bar(total, stream=None, delay=None, unit="req"):
    """A tqdm bar on ``stream`` (stderr) only when it is a terminal (tqdm is imported only then); else None."""
    stream = sys.stderr if stream is None else stream
    if not getattr(stream, "isatty", lambda: False)():
        return None
    from tqdm import tqdm

    if delay is None:
        try:
            delay = max(0.0, float(os.environ.get(DELAY, "1")))
        except ValueError:
            delay = 1.0

    return tqdm(total=total or None, unit=unit, file=stream, delay=delay, leave=False, dynamic_ncols=True)
