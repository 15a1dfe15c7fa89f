"""The ahead-of-time module (kvlab/util/ahead.py): built by the suite's warm-up where a C compiler is found, it gives
what numba's JIT gives, serves only the types it was built for, and keeps kvlab simulate off numba's compiler."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT
from engine_reference import ToyCost
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine import chains
from test_simulate_compiled import STATS, Columnar

from kvlab.engine import compiled, kernel
from kvlab.engine.arrivals import Arrivals
from kvlab.engine.settings import EngineSettings
from kvlab.util import ahead
from kvlab.util.errors import KvlabError
from kvlab.util.memory import Footprint, Meter
from kvlab.workflow import kernels as warmup
from kvlab.workloads import dense

TRACE = ROOT / "data" / "traces" / "mooncake" / "synthetic_trace.jsonl.gz"
MODEL = ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json"

LOOP = (kernel.run, kernel.known_prices, kernel.moved_prices, kernel.number_blocks)  # what the driver calls


@pytest.fixture(scope="module")
def module():
    """The module the warm-up built; where no C compiler is found there is none to test (the JIT serves alone, as
    every other test shows)."""
    if ahead.compiler() is None:
        pytest.skip("no C compiler on this machine: no ahead-of-time module is built")
    assert ahead.built(), "a C compiler is found, yet the suite's warm-up built no ahead-of-time module"
    return ahead.module_path()


def loop_figures(workload, block, gpu, cpu, engine):
    """The compiled loop's every figure (floats by their repr), or the line it stopped with."""
    meter = Meter(2**60, Footprint())
    try:
        stats = compiled.run(
            workload, engine, gpu, cpu, block, ToyCost(block), Arrivals(speedup=0.5), True, True, meter
        )
    except KvlabError as error:
        return str(error)
    figures = {name: repr(getattr(stats, name)) for name in STATS}
    times = {name: [repr(value) for value in getattr(stats, name)] for name in ("ttft_ms", "tpot_ms", "e2e_ms")}
    return figures, times, [repr(row) for row in stats.rows]


@settings(max_examples=40, deadline=None)
@given(chains(whole_blocks=False), st.data())
def test_the_module_gives_what_the_jit_gives(module, workload, data):
    """Random requests through the compiled loop, the module off (KVLAB_AOT=0) and on: every figure the same, and
    with it on, the module served the driver's every call of the loop's kernels."""
    block, requests = workload
    needs = [math.ceil((tokens + output - 1) / block) for _, tokens, output in requests]
    largest = max(len(keys) for keys, _, _ in requests)
    gpu = data.draw(st.integers(max(1, max(needs) - 1), max(needs) + 3 * len(requests)), label="gpu blocks")
    cpu = data.draw(st.sampled_from([0, largest, 3 * largest]), label="cpu blocks")
    engine = EngineSettings(
        max_num_batched_tokens=data.draw(st.sampled_from([block, 64, 8192]), label="budget"),
        max_num_seqs=data.draw(st.integers(1, 6), label="max seqs"),
        generated_blocks=data.draw(st.sampled_from(["keep", "drop"]), label="generated"),
    )
    columnar = Columnar(requests, [0.01 * number for number in range(len(requests))], 2, 1.0)
    with ahead.off():
        jit = loop_figures(columnar, block, gpu, cpu, engine)
    calls, saved = [], {}
    for entry in LOOP:  # each resolved by the run above: count who serves it
        saved[entry] = entry._served, entry.dispatcher
        entry._served = [
            (checks, lambda *args, f=function, e=entry: calls.append((e, "module")) or f(*args))
            for checks, function in entry._served
        ]
        entry.dispatcher = lambda *args, f=entry.dispatcher, e=entry: calls.append((e, "jit")) or f(*args)
    try:
        aot = loop_figures(columnar, block, gpu, cpu, engine)
    finally:
        for entry, (served, dispatcher) in saved.items():
            entry._served, entry.dispatcher = served, dispatcher
    assert aot == jit
    assert {how for _, how in calls} == {"module"} and (kernel.run, "module") in calls


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=6),
    st.sampled_from(["int64", "int32", "uint64"]),
    st.booleans(),
    st.integers(1, 3),
)
def test_a_value_of_another_type_is_served_by_the_jit(module, pieces, dtype, strided, split):
    """The module reads a buffer as the type it was built for; given ints of another width, or a strided view, the
    marked kernel still answers as a brute-force reading of its docstring does: the JIT served it."""
    counts = np.array([math.ceil(count / split) for count in pieces], dtype=np.int64)
    ids = np.arange(10, 10 + 2 * int(counts.sum()), dtype=dtype)[:: 2 if strided else 1][: int(counts.sum())]
    want, start = [], 0
    for request, count in enumerate(counts):
        want += [int(ids[start + within // split]) * split + within % split for within in range(pieces[request])]
        start += count
    got = dense.pieces_of(ids, counts, np.array(pieces, dtype=np.int64), split)
    assert got.tolist() == want


def test_kvlab_simulate_starts_no_numba_compiler(module):
    """With the module, kvlab simulate on a trace never sets up numba's compiler (numba/core/caching.py's
    load_overload would import numba.np.arraymath, and scipy's BLAS with it), whether it reads the trace's own blocks
    (512 tokens: interned ids) or cuts them (64); with KVLAB_AOT=0 it does."""
    code = (
        "import contextlib, io, sys; from kvlab.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main(['simulate', '--workload', 'mooncake', '--trace', {str(TRACE)!r}, '--block-tokens',"
        " sys.argv[1], '--gpu-tokens', '432960', '--cpu-tokens', '1731840', '--engine', 'vllm', '--gpu-system',"
        f" 'h100_sxm', '--model-config', {str(MODEL)!r}])\n"
        "print(code, 'numba.np.arraymath' in sys.modules, 'scipy.linalg' in sys.modules)"
    )
    seen = {}
    for block, switch in (("512", "1"), ("64", "1"), ("64", "0")):
        environment = {**os.environ, ahead.SWITCH: switch}
        done = subprocess.run(
            [sys.executable, "-c", code, block], cwd=ROOT, capture_output=True, text=True, env=environment
        )
        seen[block, switch] = done.stdout.split()
    started = ["0", "True", "True"]
    assert seen == {("512", "1"): ["0", "False", "False"], ("64", "1"): ["0", "False", "False"], ("64", "0"): started}


def test_without_a_c_compiler_the_warm_up_says_so_and_goes_on(monkeypatch, capsys, tmp_path):
    """No compiler (``$CC`` names none): one line, no build; a build that fails: one line with its reason."""
    monkeypatch.setattr(ahead, "built", lambda: False)
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert ahead.compiler() is None
    warmup._ahead()
    assert capsys.readouterr().err == (
        "kvlab: no C compiler found: numba's JIT serves kvlab simulate's kernels (no ahead-of-time module)\n"
    )
    monkeypatch.setenv("CC", sys.executable)  # found, and the build below fails before calling it

    def failing():
        raise RuntimeError("first line\nthe compiler's last line")

    monkeypatch.setattr(ahead, "build", failing)
    warmup._ahead()
    assert capsys.readouterr().err.splitlines()[-1] == (
        "kvlab: the ahead-of-time module did not build (the compiler's last line): numba's JIT serves"
    )
