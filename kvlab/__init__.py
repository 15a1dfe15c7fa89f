"""kvlab: a reproducible lab, and a planning tool, for KV-cache offloading in LLM serving.

Layers, bottom to top (tests/test_imports.py holds them; docs/layout.md lists every folder): ``util`` (no domain
knowledge), ``workloads`` (where requests come from), ``cache`` (the engines and their settings), ``loop`` (the one
request loop), ``curves`` and ``designs``, ``sizing``, ``latency``, ``measure``, ``report``, ``api`` (the Python
API), ``workflow`` (what the Snakefile needs; never imports ``cli``), and ``cli`` (every command, the only layer
that parses arguments). The three lab scripts (``kvsim``, ``scenario``, ``summarize``) stand beside them:
standard library only, they also work when copied alone, and only their command wrappers import them.

From Python: ``kvlab.plan(...)``, ``kvlab.replay(...)``, ``kvlab.simulate(...)``, ``kvlab.curve(...)``,
``kvlab.size(...)`` and ``kvlab.ttft_predict(...)`` (``ttft_breakeven``, ``ttft_systems``) are the functions of
``kvlab/api/`` (what ``kvlab plan``, ``replay``, ``simulate``, ``mrc``, ``size`` and ``ttft predict`` run;
docs/python.md),
imported when first used, so that ``import kvlab`` stays light.
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


FUNCTIONS = ("plan", "replay", "simulate", "curve", "size", "ttft_predict", "ttft_breakeven", "ttft_systems")  # api's


def __getattr__(name):
    """``kvlab.plan``, ``kvlab.replay``, ``kvlab.simulate``, ``kvlab.curve``, ``kvlab.size``, ``kvlab.ttft_*``:
    kvlab.api's functions, imported on first use (the request loop they run is the module :mod:`kvlab.loop`)."""
    if name in FUNCTIONS:
        from kvlab import api

        return getattr(api, name)
    raise AttributeError(f"module 'kvlab' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *FUNCTIONS})
