"""kvlab/latency/database.py's memo of the measured database's answers, kept in the user's cache folder.

The expectations are aiconfigurator-core's own ``EngineHandle`` (compiled here, not through kvlab), compared bit for
bit (``struct.pack("<d")``): a Database that found its answers in the memo (this process after a flush, or a second
process) gives the handle's floats without making the handle; a memo that is corrupt, cut or of another format is
empty; a cache folder that cannot be written only means no memo; the errors are the ones without a memo. Every test
keeps its cache in a temporary folder (``$KVLAB_CACHE``), never the user's.
"""

import contextlib
import io
import json
import struct
import tempfile
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, run_python
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.latency import database
from kvlab.latency.database import Database
from kvlab.util.errors import SettingError

MODELS = ROOT / "models"
LLAMA_8B = MODELS / "Llama-3.1-8B-Instruct"
SYSTEM = "h100_sxm"
FEW = settings(max_examples=25, deadline=None, database=None)


@pytest.fixture(scope="module")
def handle():
    """aiconfigurator-core's own EngineHandle of Llama-3.1-8B on h100_sxm (vLLM, its current version)."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        return EngineHandle.compile(str(LLAMA_8B), SYSTEM, "vllm", tp_size=1)


@contextlib.contextmanager
def fresh_process(folder):
    """This process as a fresh one whose cache folder is ``folder``: no memo read yet; yields the ``_handle`` calls."""
    calls = []
    made = database._handle

    def counted(*setting):
        calls.append(setting)
        return made(*setting)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KVLAB_CACHE", str(folder))
        patch.setattr(database, "_memos", {})
        patch.setattr(database, "_handle", counted)
        yield calls


def memo_file(folder):
    """The one memo in ``folder``."""
    (path,) = (Path(folder) / "aiconfigurator").glob("*.memo")
    return path


def bits(numbers):
    return [struct.pack("<d", number) for number in numbers]


def ask(model, prefills, decodes):
    return [model.prefill_ms(*query) for query in prefills] + [model.decode_ms(*query) for query in decodes]


def expected(handle, prefills, decodes):
    """The handle's answers to the same queries (the prefix capped at ``tokens - 1``, as kvlab asks)."""
    return [
        handle.predict_prefill_latency(batch, tokens, min(cached, tokens - 1)) for tokens, cached, batch in prefills
    ] + [handle.predict_decode_latency(batch, context, steps) for batch, context, steps in decodes]


@st.composite
def prefill_queries(draw):
    tokens = draw(st.integers(1, 65536))
    return tokens, draw(st.integers(0, tokens + 64)), draw(st.integers(1, 8))  # a full hit among them


PREFILLS = st.lists(prefill_queries(), min_size=1, max_size=12)
DECODES = st.lists(st.tuples(st.integers(1, 64), st.integers(1, 65536), st.just(2)), max_size=6)


# --------------------------------------------------------------------------------------------
# A warm memo is the handle's answer, bit for bit, without the handle
# --------------------------------------------------------------------------------------------


@FEW
@given(prefills=PREFILLS, decodes=DECODES)
def test_a_warm_memo_is_the_handles_answer_bit_for_bit(handle, prefills, decodes):
    truth = bits(expected(handle, prefills, decodes))
    with tempfile.TemporaryDirectory() as folder:
        with fresh_process(folder) as calls:
            cold = Database(LLAMA_8B, SYSTEM, "vllm")
            assert bits(ask(cold, prefills, decodes)) == truth
            assert calls  # the memo was empty: the handle answered
            database.flush()
        with fresh_process(folder) as calls:
            warm = Database(LLAMA_8B, SYSTEM, "vllm")
            assert bits(ask(warm, prefills, decodes)) == truth
            assert calls == []  # the validation query too: the memo's


def test_a_second_process_answers_from_the_memo_and_keeps_its_new_ones_at_exit(handle, tmp_path, monkeypatch):
    monkeypatch.setenv("KVLAB_CACHE", str(tmp_path))
    prefills, decodes = [(8192, 0, 1), (8192, 8192, 1), (3000, 1024, 4)], [(16, 4096, 2)]
    with fresh_process(tmp_path):
        Database(LLAMA_8B, SYSTEM, "vllm").decode_ms(*decodes[0])
        for query in prefills:
            Database(LLAMA_8B, SYSTEM, "vllm").prefill_ms(*query)
        database.flush()
    script = textwrap.dedent(f"""
        import json, sys
        from kvlab.latency.database import Database
        model = Database({str(LLAMA_8B)!r}, {SYSTEM!r}, "vllm")
        answers = [model.prefill_ms(*query) for query in {prefills!r}] + [model.decode_ms(*{decodes[0]!r})]
        engine = "aiconfigurator_core.sdk.engine" in sys.modules
        model.prefill_ms(777)  # new: kept at exit, never flushed here
        print(json.dumps({{"answers": [answer.hex() for answer in answers], "engine": engine}}))
    """)
    done = run_python("-c", script)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["engine"] is False  # every query in the memo: aiconfigurator-core's engine never imported
    assert [float.fromhex(answer) for answer in shown["answers"]] == expected(handle, prefills, decodes)
    prefill, decode = database._decode(memo_file(tmp_path).read_bytes())
    assert prefill[1, 777, 0] == handle.predict_prefill_latency(1, 777, 0)  # written at the second process's exit
    assert set(prefill) == {(1, 1, 0), (1, 777, 0), (1, 8192, 0), (1, 8192, 8191), (4, 3000, 1024)}
    assert set(decode) == {(16, 4096, 2)}


def test_a_database_of_the_same_setting_shares_the_processs_memo(tmp_path):
    with fresh_process(tmp_path) as calls:
        first, second = Database(LLAMA_8B, SYSTEM, "vllm"), Database(LLAMA_8B, SYSTEM, "lmcache")  # vLLM's kernels
        assert first.memo is second.memo
        assert len(calls) == 1  # one validation query asked, the second Database's from the memo
        assert first.prefill_ms(4096, 100) == second.prefill_ms(4096, 100)
        assert len(calls) == 2


# --------------------------------------------------------------------------------------------
# Written whole: merged with what another process kept, or not at all
# --------------------------------------------------------------------------------------------


def test_a_flush_merges_what_another_process_kept_meanwhile(handle, tmp_path):
    with fresh_process(tmp_path):
        Database(LLAMA_8B, SYSTEM, "vllm").flush()
    with fresh_process(tmp_path):
        one = Database(LLAMA_8B, SYSTEM, "vllm")
        with fresh_process(tmp_path):
            other = Database(LLAMA_8B, SYSTEM, "vllm")  # read the file before ``one`` flushed
            other.prefill_ms(2000)
            one.prefill_ms(1000)
            one.flush()
            other.flush()
    prefill, decode = database._decode(memo_file(tmp_path).read_bytes())
    assert set(prefill) == {(1, 1, 0), (1, 1000, 0), (1, 2000, 0)}
    assert bits(prefill.values()) == bits(handle.predict_prefill_latency(*query) for query in prefill)
    assert decode == {}


def test_a_memo_past_its_limit_keeps_the_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(database, "LIMIT", 3)
    with fresh_process(tmp_path):
        model = Database(LLAMA_8B, SYSTEM, "vllm")
        for tokens in (10, 20, 30, 40):
            model.prefill_ms(tokens)
        model.flush()
    prefill, _ = database._decode(memo_file(tmp_path).read_bytes())
    assert list(prefill) == [(1, 20, 0), (1, 30, 0), (1, 40, 0)]


def corrupt(data):
    """Each way a memo file goes wrong: (id, its bytes)."""
    body = len(database.MAGIC) + 16
    flipped = bytearray(data)
    flipped[-1] ^= 1  # the last answer's lowest bit: only the digest tells
    return {
        "empty": b"",
        "garbage": b"\x00not a memo\xff" * 40,
        "cut": data[:-8],
        "longer": data + b"\x00" * 32,
        "one-bit-flipped": bytes(flipped),
        "another-version": data.replace(database.MAGIC, database.MAGIC.replace(b"1", b"2"), 1),
        "header-only": data[:body],
        "json": json.dumps({"prefill": [1, 2, 3]}).encode(),
    }


CORRUPTIONS = list(corrupt(b"x" * 100))


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_a_corrupt_memo_is_empty_and_written_whole_again(handle, tmp_path, how):
    with fresh_process(tmp_path):
        model = Database(LLAMA_8B, SYSTEM, "vllm")
        model.prefill_ms(5000, 100)
        model.decode_ms(8, 2000)
        model.flush()
    path = memo_file(tmp_path)
    path.write_bytes(corrupt(path.read_bytes())[how])
    assert database._decode(path.read_bytes()) == ({}, {})
    with fresh_process(tmp_path) as calls:
        model = Database(LLAMA_8B, SYSTEM, "vllm")
        assert calls  # nothing found in it: the handle is made
        assert model.prefill_ms(5000, 100) == handle.predict_prefill_latency(1, 5000, 100)
        assert model.decode_ms(8, 2000) == handle.predict_decode_latency(8, 2000, 2)
        model.flush()
    prefill, decode = database._decode(path.read_bytes())
    assert set(prefill) == {(1, 1, 0), (1, 5000, 100)} and set(decode) == {(8, 2000, 2)}


def test_an_unwritable_cache_folder_only_means_no_memo(handle, tmp_path):
    folder = tmp_path / "a-file"  # a file where the folder would be: nothing under it can be read or written
    folder.write_text("not a folder")
    for _ in range(2):
        with fresh_process(folder) as calls:
            model = Database(LLAMA_8B, SYSTEM, "vllm")
            assert model.prefill_ms(6000, 10) == handle.predict_prefill_latency(1, 6000, 10)
            model.flush()
            database.flush()
            assert calls  # every process asks the handle again
    assert folder.read_text() == "not a folder"


# --------------------------------------------------------------------------------------------
# The errors are the handle's, and never kept
# --------------------------------------------------------------------------------------------


def test_a_model_the_package_cannot_compile_fails_as_without_a_memo(tmp_path):
    opt = MODELS / "opt-1.3b"
    for _ in range(2):  # nothing kept by the first failure
        with fresh_process(tmp_path), pytest.raises(SettingError) as error:
            Database(opt, SYSTEM, "vllm")
        assert str(error.value) == (
            f"aiconfigurator-core cannot price {opt} on h100_sxm/vllm tp 1:"
            " The model's architecture OPTForCausalLM is not supported"
        )
    assert list((tmp_path / "aiconfigurator").glob("*.memo")) == []
    with fresh_process(tmp_path), pytest.raises(SettingError, match="num_heads 32 should be divisible by tp_size 3"):
        Database(LLAMA_8B, SYSTEM, "vllm", tp=3)


QUERY_ERRORS = [
    ("prefill_ms", (0,), "out of range integral type conversion attempted"),
    ("prefill_ms", (100, 0, 0), "perf database error: perf_interp: no data to anchor query"),
    ("decode_ms", (0, 100), "perf database error: perf_interp: no data to anchor query"),
]


@pytest.mark.parametrize(
    ("method", "query", "reason"), QUERY_ERRORS, ids=["no-tokens", "prefill-batch-0", "decode-batch-0"]
)
def test_a_query_the_database_refuses_fails_as_without_a_memo(tmp_path, method, query, reason):
    what = f"aiconfigurator-core cannot price {LLAMA_8B} on h100_sxm/vllm tp 1: {reason}"
    for _ in range(2):  # the second process's memo holds the validation query, not the refused one
        with fresh_process(tmp_path):
            model = Database(LLAMA_8B, SYSTEM, "vllm")
            for _ in range(2):
                with pytest.raises(SettingError) as error:
                    getattr(model, method)(*query)
                assert str(error.value).startswith(what)
            model.flush()
    prefill, decode = database._decode(memo_file(tmp_path).read_bytes())
    assert set(prefill) == {(1, 1, 0)} and decode == {}


def test_a_query_of_other_numbers_is_asked_never_kept(handle, tmp_path):
    with fresh_process(tmp_path):
        model = Database(LLAMA_8B, SYSTEM, "vllm")
        assert model.prefill_ms(100.5) == handle.predict_prefill_latency(1, 100.5, 0)
        assert model.prefill_ms(100.5) == handle.predict_prefill_latency(1, 100.5, 0)  # asked again
        model.flush()
    prefill, _ = database._decode(memo_file(tmp_path).read_bytes())
    assert set(prefill) == {(1, 1, 0)}
