"""Prefill and decode priced from aiconfigurator-core's kernel database, measured on the hardware.

``EngineHandle.compile(model_dir, system, backend, backend_version, tp_size=...)`` walks the model's
operations (aiconfigurator-core ``sdk/engine.py``); ``predict_prefill_latency(batch, isl, prefix)`` is
the context phase of ``batch`` requests of ``isl`` tokens whose first ``prefix`` are cached, in ms, and
``predict_decode_latency(batch, isl, osl)`` a generation. It is imported only here, only by what prices
time (its first query loads the database: about a second). Its notices on stderr ("Loading low-fidelity
fallback rows ...") are kept off the command's output.

A compiled handle's spec (``EngineHandle.spec_bytes``, a few KB) is kept in the user's cache folder
(:mod:`kvlab.util.user_cache`), keyed by the package's version, the
system, the engine version, the TP degree and the model's config.json: ``EngineHandle(spec)`` gives the same
answers without walking the model again (0.9 s of a process's start-up; tests/test_hardware.py holds every
answer to a freshly compiled handle's).
"""

import contextlib
import functools
import io
from pathlib import Path

from kvlab.latency.systems import BACKENDS, PACKAGE, database_version, libyaml, package_version
from kvlab.util import user_cache
from kvlab.util.errors import SettingError

__all__ = ["Database"]


def _spec_path(model_dir, system, backend, version, tp):
    """Where the compiled spec of this setting is kept, or None (no config.json to key it by)."""
    try:
        config = (Path(model_dir) / "config.json").read_bytes()
    except OSError:
        return None
    return user_cache.entry("aiconfigurator", ".spec", package_version(), system, backend, version, tp, config)


@functools.cache
def _handle(model_dir, system, backend, version, tp):
    quiet = io.StringIO()
    with contextlib.redirect_stderr(quiet), contextlib.redirect_stdout(quiet), libyaml():
        from aiconfigurator_core.sdk.engine import EngineHandle

        path = _spec_path(model_dir, system, backend, version, tp)
        spec = user_cache.read(path) if path is not None else None
        if spec is not None:
            try:
                return EngineHandle(spec)
            except Exception:  # a spec of another build of the package: compile it again
                pass
        try:
            # the experts sharded over the same ranks: vLLM's default (no --enable-expert-parallel); without it
            # the package takes one rank for the experts and refuses every mixture of experts at tp > 1
            parallel = {"tp_size": tp, "moe_tp_size": tp, "moe_ep_size": 1}
            handle = EngineHandle.compile(model_dir, system, backend, backend_version=version, **parallel)
        except Exception as error:  # its refusals are ValueError, KeyError, NotImplementedError, ...
            reason = str(error).split("\n")[0].split(". Supported")[0][:300]
            raise SettingError(f"{PACKAGE} cannot price {model_dir} on {system}/{backend} tp {tp}: {reason}") from None
        if path is not None:
            user_cache.keep(path, handle.spec_bytes)
        return handle


class Database:
    """One model on one system and engine version at one TP degree, priced by the measured database."""

    def __init__(self, model_dir, system, engine, version=None, tp=1):
        self.backend = BACKENDS[engine]
        self.version = database_version(system, self.backend, version)
        self.handle = _handle(str(model_dir), system, self.backend, self.version, tp)
        self.source = f"database: {PACKAGE} {package_version()} {system}/{self.backend}/{self.version}"
        self.what = f"{model_dir} on {system}/{self.backend} tp {tp}"
        self.prefill_ms(1)  # a model it compiles but has no kernels for (a cut config.json) fails its queries

    def _query(self, predict, *numbers):
        try:
            return predict(*numbers)
        except Exception as error:  # PerfDataNotAvailableError (a RuntimeError), ValueError, ...
            reason = str(error).split("\n")[0][:300]
            raise SettingError(f"{PACKAGE} cannot price {self.what}: {reason}") from None

    def prefill_ms(self, tokens, cached=0, batch=1):
        """A prefill's ms; at least the last token is computed (a full hit recomputes it: vLLM's
        ``kv_cache_manager.get_computed_blocks`` caps a hit at ``num_tokens - 1``)."""
        return self._query(self.handle.predict_prefill_latency, batch, tokens, min(cached, tokens - 1))

    def decode_ms(self, batch, context, steps=2):
        """One decode step of ``batch`` requests of ``context`` tokens (the database's ``osl`` 2: one step)."""
        return self._query(self.handle.predict_decode_latency, batch, context, steps)
