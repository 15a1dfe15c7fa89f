"""kvlab: a reproducible lab, and a planning tool, for KV-cache offloading in LLM serving.

The three lab scripts (``kvsim``, ``scenario``, ``summarize``) are standard-library only and also work when
copied alone. The domain is grouped by concern (``cache``, ``workloads``, ``replay``, ``curves``, ``sizing``,
``latency``, ``measure``, ``report``); ``cli`` is every command (``kvlab COMMAND``), the only layer that parses
arguments; ``config``, ``pipeline``, ``runs`` and ``freshness`` serve the Snakemake workflow.
"""


def _numba_cache_folder():
    """numba caches compiled kernels beside the code, else in the user's cache folder; where neither can be
    written (a read-only checkout and an unwritable HOME) it refuses to compile at all ("cannot cache function:
    no locator available"). There, before numba is imported, point it at a folder that can be written: the
    user's cache folder, else the temporary one. Standard library only: every kvlab import runs this."""
    import os
    import tempfile

    if "NUMBA_CACHE_DIR" in os.environ or os.access(os.path.dirname(os.path.abspath(__file__)), os.W_OK):
        return
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    temporary = os.path.join(tempfile.gettempdir(), f"kvlab-numba-{os.getuid()}")
    for folder in (os.path.join(cache, "kvlab-numba"), temporary):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            os.environ["NUMBA_CACHE_DIR"] = folder
            return


_numba_cache_folder()
