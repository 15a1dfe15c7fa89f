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

Its answers are kept there too, under the same keys (a ``.memo`` beside the ``.spec``): the query triples and
their float64 answers, bit for bit, read once per process. The handle is made only for a query the memo lacks,
so a run whose queries were all asked before never loads the database (0.8 s) nor asks it (~47 us a query).
A process's new answers are merged into the file again at exit (or :func:`flush`), written whole; a memo that
is corrupt, foreign or unreadable is empty (tests/test_database_memo.py).
"""

import atexit
import contextlib
import functools
import hashlib
import io
import operator
import struct
from pathlib import Path

import numpy as np

from kvlab.latency.systems import BACKENDS, PACKAGE, database_version, libyaml, package_version
from kvlab.util import user_cache
from kvlab.util.errors import SettingError

__all__ = ["Database", "flush"]

MAGIC = b"kvlab database memo 1\n"  # the format's version: another never parses
LIMIT = 1 << 17  # answers kept per kind (4 MB, read in ~0.1 s): past it the oldest go
_COUNTS = struct.Struct("<QQ")
_DIGEST = 16


def _keys(model_dir, system, backend, version, tp):
    """The cache's keys of this setting, or None (no config.json to key it by)."""
    try:
        config = (Path(model_dir) / "config.json").read_bytes()
    except OSError:
        return None
    return (package_version(), system, backend, version, tp, config)


def _spec_path(model_dir, system, backend, version, tp):
    """Where the compiled spec of this setting is kept, or None (no config.json to key it by)."""
    keys = _keys(model_dir, system, backend, version, tp)
    return None if keys is None else user_cache.entry("aiconfigurator", ".spec", *keys)


def _memo_path(model_dir, system, backend, version, tp):
    """Where the answers of this setting are kept, or None."""
    keys = _keys(model_dir, system, backend, version, tp)
    return None if keys is None else user_cache.entry("aiconfigurator", ".memo", *keys)


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


# --------------------------------------------------------------------------------------------
# The memo: {(batch, tokens, prefix): ms} of the prefills and {(batch, context, steps): ms} of the decodes
# --------------------------------------------------------------------------------------------


def _encode(prefill, decode):
    """MAGIC, a digest of the body, then the body: the two counts, and per kind its three int64 columns and its
    float64 answers (little-endian)."""
    parts = [_COUNTS.pack(len(prefill), len(decode))]
    for answers in (prefill, decode):
        columns = np.array(list(answers), dtype="<i8").reshape(-1, 3).T
        parts += [np.ascontiguousarray(columns).tobytes(), np.array(list(answers.values()), dtype="<f8").tobytes()]
    body = b"".join(parts)
    return MAGIC + hashlib.blake2b(body, digest_size=_DIGEST).digest() + body


def _columns(data):
    """Per kind, the query triples (int64, one row each) and the answers (float64) of a memo file's bytes, as views
    of them; empty ones for no file, or one corrupt, cut or of another format."""
    empty = (np.zeros((0, 3), dtype=np.int64), np.zeros(0))
    if data is None or not data.startswith(MAGIC) or len(data) < len(MAGIC) + _DIGEST + _COUNTS.size:
        return empty, empty
    digest, body = data[len(MAGIC) : len(MAGIC) + _DIGEST], memoryview(data)[len(MAGIC) + _DIGEST :]
    if hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
        return empty, empty
    counts = _COUNTS.unpack_from(body)
    if len(body) != _COUNTS.size + 32 * sum(counts):
        return empty, empty
    found, offset = [], _COUNTS.size
    for count in counts:
        keys = np.frombuffer(body, "<i8", 3 * count, offset).reshape(3, count).T
        found.append((keys, np.frombuffer(body, "<f8", count, offset + 24 * count)))
        offset += 32 * count
    return tuple(found)


def _answers(keys, answers):
    return dict(zip(map(tuple, keys.tolist()), answers.tolist(), strict=True))


def _decode(data):
    """The two dicts of a memo file's bytes (:func:`_columns`'s)."""
    return tuple(_answers(*kind) for kind in _columns(data))


def _key(query):
    """The query as a triple of int64s, or None (a query of other numbers is asked, never kept)."""
    try:
        key = tuple(map(operator.index, query))
    except TypeError:
        return None
    return key if all(-(1 << 63) <= number < 1 << 63 for number in key) else None


class _Memo:
    """One setting's answers: those its file held when first asked for (as arrays: the dicts are made on the first
    query that needs them, so a run that asks none never makes them), and this process's new ones."""

    def __init__(self, path):
        self.path = path
        self.columns = _columns(user_cache.read(path) if path is not None else None)
        self._dicts = None
        self.new = 0

    @property
    def prefill(self):
        return self._answers()[0]

    @property
    def decode(self):
        return self._answers()[1]

    def _answers(self):
        if self._dicts is None:
            self._dicts = tuple(_answers(*kind) for kind in self.columns)
        return self._dicts

    def answered(self):
        """Per kind ``(query triples, answers)`` as arrays: the file's and this process's."""
        if self._dicts is None:
            return self.columns
        return tuple(
            (
                np.array(list(answers), dtype=np.int64).reshape(-1, 3),
                np.fromiter(answers.values(), dtype=np.float64, count=len(answers)),
            )
            for answers in self._dicts
        )

    def add(self, answers, query, answer):
        key = _key(query)
        if key is not None and isinstance(answer, float):
            answers[key] = float(answer)
            self.new += 1
            _at_exit()

    def flush(self):
        """Merge the new answers into the file as it is now and write it whole (the last writer's file wins)."""
        if self.path is None or not self.new:
            return
        prefill, decode = _decode(user_cache.read(self.path))
        prefill.update(self.prefill)
        decode.update(self.decode)
        kept = [
            dict(list(answers.items())[-LIMIT:]) if len(answers) > LIMIT else answers for answers in (prefill, decode)
        ]
        user_cache.keep(self.path, _encode(*kept))
        self.new = 0


_memos = {}  # path (or setting, where there is no path) -> _Memo: each file read once per process


def _memo(model_dir, system, backend, version, tp):
    path = _memo_path(model_dir, system, backend, version, tp)
    where = path if path is not None else (model_dir, system, backend, version, tp)
    if where not in _memos:
        _memos[where] = _Memo(path)
    return _memos[where]


def flush():
    """Write every setting's new answers to the user's cache (also done at the process's exit)."""
    for memo in list(_memos.values()):
        memo.flush()


@functools.cache
def _at_exit():
    atexit.register(flush)


class Database:
    """One model on one system and engine version at one TP degree, priced by the measured database."""

    def __init__(self, model_dir, system, engine, version=None, tp=1):
        self.backend = BACKENDS[engine]
        self.version = database_version(system, self.backend, version)
        self.setting = (str(model_dir), system, self.backend, self.version, tp)
        self.memo = _memo(*self.setting)
        self.source = f"database: {PACKAGE} {package_version()} {system}/{self.backend}/{self.version}"
        self.what = f"{model_dir} on {system}/{self.backend} tp {tp}"
        if not any(len(answers) for _, answers in self.memo.columns):  # an answer kept shows the handle worked
            self.prefill_ms(1)  # a model it compiles but has no kernels for (a cut config.json) fails its queries

    @property
    def handle(self):
        """aiconfigurator-core's EngineHandle of this setting, made on the first query the memo lacks."""
        return _handle(*self.setting)

    def _query(self, predict, *numbers):
        try:
            return predict(*numbers)
        except Exception as error:  # PerfDataNotAvailableError (a RuntimeError), ValueError, ...
            reason = str(error).split("\n")[0][:300]
            raise SettingError(f"{PACKAGE} cannot price {self.what}: {reason}") from None

    def _answer(self, answers, ask, query):
        try:
            answer = answers.get(query)
        except TypeError:  # unhashable: the handle's to refuse
            answer = None
        if answer is None:
            answer = self._query(getattr(self.handle, ask), *query)
            self.memo.add(answers, query, answer)
        return answer

    def prefill_ms(self, tokens, cached=0, batch=1):
        """A prefill's ms; at least the last token is computed (a full hit recomputes it: vLLM's
        ``kv_cache_manager.get_computed_blocks`` caps a hit at ``num_tokens - 1``)."""
        return self._answer(self.memo.prefill, "predict_prefill_latency", (batch, tokens, min(cached, tokens - 1)))

    def decode_ms(self, batch, context, steps=2):
        """One decode step of ``batch`` requests of ``context`` tokens (the database's ``osl`` 2: one step)."""
        return self._answer(self.memo.decode, "predict_decode_latency", (batch, context, steps))

    def answered(self):
        """The queries answered so far, the memo's and this process's: per kind (prefill, decode) the int64 rows
        ``(batch, tokens, prefix)`` or ``(batch, context, steps)`` and their ms (to read, not to change)."""
        return self.memo.answered()

    def flush(self):
        """Write this setting's new answers to the user's cache now (else at the process's exit)."""
        self.memo.flush()
