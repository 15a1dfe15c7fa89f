"""kvlab: a reproducible lab, and a planning tool, for KV-cache offloading in LLM serving.

Layers, bottom to top (tests/test_imports.py holds them; docs/layout.md lists every folder): ``util`` (no domain
knowledge), ``serving`` (the serving engines kvlab models, one module each), ``workloads`` (where requests come
from), ``cache`` (the two tiers and their settings), ``loop`` (the one request loop), ``fleet`` (instances behind a
router), ``curves`` and ``designs``,
``sizing``, ``latency``, ``simulator`` (one engine instance on a clock), ``measure``, ``report``, ``api`` (the Python
API), ``web`` (``kvlab serve``'s page), ``workflow`` (what the Snakefile needs; never imports ``cli``), and
``cli`` (every command, the only layer
that parses arguments). The three lab scripts (``kvsim``, ``scenario``, ``summarize``) stand beside them:
standard library only, they also work when copied alone, and only their command wrappers import them.

From Python: ``kvlab.plan(...)``, ``kvlab.replay(...)``, ``kvlab.simulate(...)``, ``kvlab.curve(...)``,
``kvlab.size(...)`` and ``kvlab.ttft_predict(...)`` (``ttft_breakeven``, ``ttft_systems``) are the functions of
``kvlab/api/`` (what ``kvlab plan``, ``replay``, ``simulate``, ``mrc``, ``size`` and ``ttft predict`` run;
docs/python.md),
imported when first used, so that ``import kvlab`` stays light.
"""

FUNCTIONS = (
    "plan",
    "replay",
    "simulate",
    "search",
    "curve",
    "size",
    "ttft_predict",
    "ttft_breakeven",
    "ttft_systems",
)  # api's


def __getattr__(name):
    """``kvlab.plan``, ``kvlab.replay``, ``kvlab.simulate``, ``kvlab.curve``, ``kvlab.size``, ``kvlab.ttft_*``:
    kvlab.api's functions, imported on first use (the request loop they run is the module :mod:`kvlab.loop`)."""
    if name in FUNCTIONS:
        from kvlab.util.kernels import writable_cache

        writable_cache()  # before numba is imported
        from kvlab import api

        return getattr(api, name)
    raise AttributeError(f"module 'kvlab' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *FUNCTIONS})
