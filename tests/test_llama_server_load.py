"""The pieces of the llama-server model that the load check (server/load_check.py) rests on, without a server: the
ubatch count of a step against a token-by-token transliteration of llama.cpp's ``split_equal`` (b11434,
src/llama-batch.cpp, sequential), the fit of a ubatch's price, the warm-up requests served alone before a run, and
load.py's CPU list."""

import argparse
import importlib.util
import random
import sys
from dataclasses import replace

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from test_llama_server_engine import FAST as PRICES  # the engine tests' prices: 0 for a ubatch

from kvlab.serving import llama_cpp as model


def split_equal_count(parts, n_ubatch):
    """The C++ loop of ``llama_batch_allocr::split_equal(n_ubatch, sequential=true, 0)`` over a batch of tokens,
    each of one sequence (no coupled sequences), called until it returns an empty ubatch."""
    seq = [slot for slot, tokens in parts for _ in range(tokens)]
    used = [False] * len(seq)
    count = 0
    while True:
        sets, last = [], -1
        for i, s in enumerate(seq):
            if used[i] or s in sets:
                continue
            if not sets or s == last + 1:
                sets.append(s)
                last = s
        if not sets:
            return count
        positions = {s: [i for i, t in enumerate(seq) if t == s and not used[i]] for s in sets}
        taken = 0
        while all(taken < len(positions[s]) for s in sets):
            for s in sets:
                used[positions[s][taken]] = True
            taken += 1
            if (taken + 1) * len(sets) > n_ubatch:
                break
        count += 1


@st.composite
def batches(draw):
    """A step's batch as update_slots builds it: the generating slots' one token each (in slot order), then the
    prompts' chunks (in slot order), each slot at most once."""
    slots = draw(st.permutations(range(6)))
    generating = sorted(slots[: draw(st.integers(0, 6))])
    rest = slots[len(generating) :]
    prompting = sorted(draw(st.sets(st.sampled_from(rest)))) if rest else []
    chunks = [draw(st.integers(1, 600)) for _ in prompting]
    return [(slot, 1) for slot in generating] + list(zip(prompting, chunks, strict=True))


@settings(deadline=None)  # the transliteration is quadratic in the batch's tokens
@given(batches(), st.sampled_from([8, 32, 512]))
def test_a_steps_ubatches_are_split_equals(parts, n_ubatch):
    assert model.ubatches(parts, n_ubatch) == split_equal_count(parts, n_ubatch)


def test_adjacent_generating_slots_share_a_ubatch_and_others_do_not():
    assert model.ubatches([(0, 1), (1, 1), (2, 1)]) == 1
    assert model.ubatches([(0, 1), (2, 1)]) == 2
    assert model.ubatches([(1, 2000)]) == -(-2000 // model.N_UBATCH)


def workload(seed, n, docs=3, doc_tokens=40, question=4, rate=8.0):
    rng = random.Random(seed)
    documents = [[1000 * (d + 1) + i for i in range(doc_tokens)] for d in range(docs)]
    requests, clock = [], 0.0
    for _ in range(n):
        clock += rng.expovariate(rate)
        tokens = documents[rng.randrange(docs)] + [rng.randrange(10**6, 2 * 10**6) for _ in range(question)]
        requests.append((clock, tokens, rng.choice([1, 3, 5])))
    return requests, documents


def test_the_fit_recovers_a_ubatchs_price():
    """Measurements made by the model at known prices, a ubatch's among them: the fit finds them again, and the
    ubatch count did vary across the run's steps (else its price could not be told from a slot's)."""
    truth = replace(PRICES, prompt_token_ms=0.2, prompt_slot_ms=12.0, generate_ms=2.5, ubatch_ms=1.5)
    requests, _ = workload(1, 80)
    server = model.Server(parallel=3, ctx=3 * 64, cache_ram_mib=1, state_bytes_per_token=1024.0)
    served, _ = model.simulate(requests, server, truth)
    windows = [r.generate_features for r in served if r.generate_features[0]]
    assert len({round(w[4] / w[0], 6) for w in windows}) > 1  # ubatches per step differ between windows
    measured = [{"prompt_ms": r.prompt_ms, "predicted_ms": r.predicted_ms} for r in served]
    fitted, report = model.fit(requests, measured, server, PRICES)
    for term in model.FITTED:
        assert getattr(fitted, term) == pytest.approx(getattr(truth, term), rel=1e-6)
    assert report["rms_ms"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_warm_ups_are_served_alone_before_the_run_and_left_out_of_it(seed):
    """Every document warmed (load.py --warm-docs) in a RAM cache that holds them all, requests that do not
    overlap (a document in a busy slot is in no other tier: a restore is a move): no timed request misses, the
    warm-ups are not in the output, and serving them as ordinary requests long before gives the same run."""
    requests, documents = workload(seed, 40, rate=0.5)
    server = model.Server(parallel=2, ctx=2 * 64, cache_ram_mib=-1, state_bytes_per_token=1024.0)
    warm_up = [(doc, 3) for doc in documents]
    served, _ = model.simulate(requests, server, PRICES, warm_up)
    assert len(served) == len(requests)
    assert all(r.cached_tokens >= len(documents[0]) for r in served)
    cold, _ = model.simulate(requests, server, PRICES)
    assert sum(not r.cached_tokens for r in cold) == len(documents)  # without them, each document's first misses
    early = [(requests[0][0] - 1e5 * (len(warm_up) - k), tokens, n) for k, (tokens, n) in enumerate(warm_up)]
    by_hand, _ = model.simulate(early + requests, server, PRICES)
    assert [r.record() | {"index": 0} for r in by_hand[len(warm_up) :]] == [r.record() | {"index": 0} for r in served]


def load_py():
    sys.path.insert(0, str(ROOT / "server"))
    spec = importlib.util.spec_from_file_location("server_load", ROOT / "server" / "load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_server_cpus_are_read_as_taskset_writes_them(monkeypatch):
    load = load_py()
    monkeypatch.setattr(load.os, "cpu_count", lambda: 4)
    assert load.cpu_list("1") == {1}
    assert load.cpu_list("0,2") == {0, 2}
    assert load.cpu_list("1-3") == {1, 2, 3}
    for bad in ("", "x", "1-", "4", "0-9"):
        with pytest.raises(argparse.ArgumentTypeError):
            load.cpu_list(bad)
