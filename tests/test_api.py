"""kvlab from Python (kvlab/api/, docs/python.md): every example of docs/python.md runs and prints what the page
shows; each function's result is its command's output for the same settings, byte for byte (the commands call
the functions: these tests hold the flags and the keywords together); a bad setting is refused in the command's
words; ``import kvlab`` imports none of it until a function is called."""

import contextlib
import inspect
import io
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, kvlab, load_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvlab as package
from kvlab import api

QWEN = "models/Qwen2.5-1.5B-Instruct/config.json"
GEMMA = "models/gemma-3-27b-it/config.json"
DOCS = ROOT / "docs" / "python.md"
FUNCTIONS = {
    "plan": "plan",
    "replay": "replay",
    "simulate": "simulate",
    "search": "search",
    "curve": "mrc",
    "size": "size",
}  # its command
TTFT_FUNCTIONS = {"ttft_predict": "predict", "ttft_breakeven": "breakeven", "ttft_systems": "systems"}  # kvlab ttft's
SOME = settings(max_examples=20, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def fenced(text):
    """``[(language, body)]`` of every fenced block of a markdown page, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, flags=re.M | re.S)


def examples(text):
    """``[(code, printed or None)]``: each python block and the text block right after it (what it prints)."""
    blocks = fenced(text)
    found = []
    for index, (language, body) in enumerate(blocks):
        if language == "python":
            after = blocks[index + 1] if index + 1 < len(blocks) else ("", "")
            found.append((body, after[1] if after[0] == "text" else None))
    return found


def test_every_python_block_of_the_page_runs_and_prints_what_the_page_shows(tmp_path, monkeypatch):
    """In a folder of its own (the repository's models/, data/, results/ reachable there), block after block in one
    namespace, as a notebook runs them."""
    for name in ("models", "data", "results"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    blocks = examples(DOCS.read_text(encoding="utf-8"))
    assert len(blocks) >= 3 and all(printed is not None for _, printed in blocks[:2])
    namespace = {"__name__": "__main__"}
    for code, printed in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(DOCS), "exec"), namespace)  # noqa: S102 - the page's own examples
        if printed is not None:
            assert out.getvalue() == printed, code
    assert (tmp_path / "hit_ratio.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_page_states_each_signature_as_it_is():
    words = " ".join(DOCS.read_text(encoding="utf-8").split())
    for name in [*FUNCTIONS, *TTFT_FUNCTIONS]:
        assert f"kvlab.{name}{inspect.signature(getattr(api, name))}" in words, name
        assert f"| `{name}` |" in words, name  # and its row of the table
    assert set(package.FUNCTIONS) == {*FUNCTIONS, *TTFT_FUNCTIONS}  # every function kvlab names


def test_the_ttft_functions_print_what_their_commands_print():
    """kvlab ttft predict, breakeven and systems call these functions: the same text, byte for byte."""
    hardware = {"model_config": QWEN, "gpu_system": "h100_sxm"}
    lab = {"workload": "lab", "docs": 3, "gpu_tokens": 5011, "cpu_tokens": 5011, "block_tokens": 5011}
    calls = {
        "ttft_predict": {**lab, **hardware, "engine": "lmcache"},
        "ttft_breakeven": {"prefix_tokens": 5011, **hardware, "link_gbps": 25.5},
        "ttft_systems": {},
    }
    assert set(calls) == set(TTFT_FUNCTIONS)
    for name, keywords in calls.items():
        result = getattr(api, name)(**keywords)
        text = result if isinstance(result, str) else result.text
        done = kvlab("ttft", TTFT_FUNCTIONS[name], *flags(**keywords), cwd=ROOT)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert done.stdout == text, name
    predicted = api.ttft_predict(**calls["ttft_predict"], per_request=True)
    document = predicted.to_dict()
    figures = document["ttft"]
    assert (predicted.latency_source, predicted.p50_ms, predicted.p99_ms, predicted.mean_ms) == (
        document["latency_source"],
        figures["p50_ms"],
        figures["p99_ms"],
        figures["mean_ms"],
    )
    assert len(predicted.requests()) == document["requests"]


def test_import_kvlab_stays_light_and_names_the_functions():
    code = (
        "import sys, kvlab; light = sorted(m for m in sys.modules if m.startswith(('kvlab', 'numpy', 'pandas')));"
        " import kvlab.api as api; print(light, kvlab.plan is api.plan, kvlab.curve is api.curve,"
        " kvlab.size is api.size, kvlab.replay is api.replay)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.split() == ["['kvlab']", "True", "True", "True", "True"]


def test_kvlab_replay_is_the_function_even_once_the_loop_is_imported():
    """The request loop is kvlab.loop, so nothing an import does can turn kvlab.replay into a module."""
    import kvlab.loop  # noqa: F401

    assert package.replay is api.replay
    called = package.replay(workload="lab", docs=2, gpu_tokens=5011)
    assert called == api.replay(workload="lab", docs=2, gpu_tokens=5011)
    assert isinstance(called, api.Replay)


# --- each function is its command ---------------------------------------------------------------------------


def flags(**keywords):
    """The command line of ``keywords``: ``--name value``, a true switch bare, None and False left out."""
    argv = []
    for name, value in keywords.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not None and value is not False:
            argv += [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return argv


def command(name, *argv):
    done = kvlab(name, *argv, cwd=ROOT)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


budgets = st.sampled_from(["0", "0.05", "0.1299", "0.5", "1", "1.5", "2"])
lab = st.fixed_dictionaries(
    {
        "docs": st.integers(1, 4),
        "tokens": st.sampled_from([100, 1000, 5011]),
        "passes": st.sampled_from(["fwd", "fwd,rev", "fwd,fwd,rev"]),
    }
)


@SOME
@given(
    workload=lab,
    chunk=st.sampled_from([None, 64, 256]),
    gpu=st.integers(0, 12000),
    cpu=budgets,
    policy=st.sampled_from(["write-through", "write-back", "selective"]),
    target=st.sampled_from([None, 0.25, 0.5, 0.9]),
    engine=st.sampled_from([None, "lmcache", "sglang"]),
)
def test_plan_is_kvlab_plan(workload, chunk, gpu, cpu, policy, target, engine):
    keywords = {"chunk_tokens": chunk, "gpu_tokens": gpu, "cpu_gib": cpu, "write_policy": policy}
    keywords |= {"target_hit_ratio": target, "engine": engine}
    result = api.plan(workload="lab", model_config=QWEN, **workload, **keywords)
    assert result.text == command("plan", *flags(workload="lab", model_config=QWEN, **workload, **keywords))
    assert result.to_dict()["cache"]["cpu_gib"] == float(cpu) == result.cpu_gib


def test_plan_of_a_window_model_in_window_is_kvlab_plan():
    keywords = {"workload": "lab", "docs": 2, "model_config": GEMMA, "gpu_gib": "0.5", "cpu_gib": "1"}
    keywords |= {"window_rule": "in-window", "target_hit_ratio": 0.5}
    assert api.plan(**keywords).text == command("plan", *flags(**keywords))


@SOME
@given(
    workload=lab,
    gpu=st.integers(0, 12000),
    cpu=st.integers(0, 12000),
    block=st.sampled_from([None, 16, 256, 1000]),
    policy=st.sampled_from(["write-through", "write-back", "selective"]),
    eviction=st.sampled_from(["lru", "fifo", "lfu", "arc", "opt"]),
    order=st.sampled_from(["tail-first", "head-first"]),
)
def test_replay_is_kvlab_replay(tmp_path_factory, workload, gpu, cpu, block, policy, eviction, order):
    out = tmp_path_factory.mktemp("replay") / "rows.csv"
    keywords = {"gpu_tokens": gpu, "cpu_tokens": cpu, "block_tokens": block, "write_policy": policy}
    keywords |= {"gpu_eviction": eviction, "cpu_eviction": eviction, "eviction_order": order}
    result = api.replay(workload="lab", **workload, **keywords, per_request=True)
    printed = command("replay", *flags(workload="lab", **workload, **keywords), "--per-request", out)
    assert (result.text, result.per_request) == (printed, out.read_text(encoding="utf-8"))
    assert len(result.requests()) == json.loads(printed)["requests"]


def test_replay_through_a_servers_design_is_kvlab_replay():
    keywords = {"workload": "lab", "docs": 3, "gpu_tokens": 6000, "cpu_tokens": 20000, "server": "llama-cpp"}
    keywords |= {"state_extra_tokens": 44, "bos": True}
    assert api.replay(**keywords).text == command("replay", *flags(**keywords))


@SOME
@given(
    workload=lab,
    block=st.sampled_from([None, 64, 256, 1000]),
    gpu=st.sampled_from([None, 0, 1000, 5011]),
    target=st.sampled_from([None, 0.3, 0.6]),
    partial=st.sampled_from(["drop", "keep"]),
)
def test_curve_is_kvlab_mrc(tmp_path_factory, workload, block, gpu, target, partial):
    out = tmp_path_factory.mktemp("curve") / "curve.csv"
    keywords = {"block_tokens": block, "gpu_tokens": gpu, "target_hit_ratio": target, "partial_blocks": partial}
    result = api.curve(workload="lab", **workload, **keywords)
    printed = command("mrc", *flags(workload="lab", **workload, **keywords), "--curve", out)
    assert (result.text, result.csv) == (printed, out.read_text(encoding="utf-8"))
    assert api.curve(workload="lab", **workload, **keywords, table=False).text == printed


@SOME
@given(
    model=st.sampled_from([QWEN, GEMMA, "models/Qwen2.5-7B-Instruct/config.json"]),
    tp=st.sampled_from([1, 2]),
    dtype=st.sampled_from(["auto", "fp8"]),
    amount=st.one_of(st.none(), st.builds(lambda n: {"tokens": n}, st.integers(0, 10**6)), st.just({"gib": "1.5"})),
)
def test_size_is_kvlab_size(model, tp, dtype, amount):
    keywords = {"model_config": model, "tp": tp, "kv_dtype": dtype, **(amount or {})}
    assert api.size(**keywords).text == command("size", *flags(**keywords))


def test_a_grid_is_its_points_one_by_one():
    grid = api.plan(workload="lab", docs=3, model_config=QWEN, gpu_tokens=[0, 5011], cpu_gib=[0, 0.5, 1])
    assert (grid.axes, grid.points) == (
        ("gpu_tokens", "cpu_gib"),
        ((0, 0), (0, 0.5), (0, 1), (5011, 0), (5011, 0.5), (5011, 1)),
    )
    for point, result in zip(grid.points, grid, strict=True):
        assert result == api.plan(workload="lab", docs=3, model_config=QWEN, gpu_tokens=point[0], cpu_gib=point[1])
    frame = grid.to_frame()
    assert list(frame["cpu_gib"]) == [0, 0.5, 1] * 2 and list(frame["gpu_tokens"]) == [0] * 3 + [5011] * 3
    assert list(frame["token_hit_ratio"]) == [result.token_hit_ratio for result in grid]
    assert grid.to_dict() == [result.to_dict() for result in grid]
    sizes = api.size(model_config=QWEN, tokens=range(0, 3000, 1000))
    assert [result.tokens for result in sizes] == [0, 1000, 2000]


def test_the_workload_as_keywords_or_as_a_mapping_is_one():
    spec = load_config()["replay"]["workloads"]["long_doc_qa"]
    options = {key: value for key, value in spec.items() if key != "source"}
    as_mapping = api.replay(workload=spec, gpu_tokens=21520, cpu_tokens=56000)
    assert as_mapping == api.replay(workload="long_doc_qa", **options, gpu_tokens=21520, cpu_tokens=56000)


@pytest.mark.parametrize(
    ("relative", "function", "keywords"),
    [
        (
            "replay/lab/gpu21520-cpu56000-block256.json",
            "replay",
            {"gpu_tokens": 21520, "cpu_tokens": 56000, "block_tokens": 256},
        ),
        (
            "mrc/lab/block256-cpu-at-gpu21520.json",
            "curve",
            {"block_tokens": 256, "gpu_tokens": 21520, "target_hit_ratio": 0.5},
        ),
        ("plan/lab.json", "plan", {}),
    ],
)
def test_the_committed_artifacts_are_what_the_functions_return(relative, function, keywords):
    """results/ as the pipeline made it, from config.yaml's settings (a plan's from ``plans``)."""
    config = load_config()
    workload = config["replay"]["workloads"]["lab"]
    if function == "plan":
        spec = dict(config["plans"]["lab"])
        keywords = {**spec, "workload": config["replay"]["workloads"][spec["workload"]]}
    else:
        keywords = {**keywords, "workload": workload}
    result = getattr(api, function)(**keywords)
    assert result.text == (ROOT / "results" / relative).read_text(encoding="utf-8")
    if function == "curve":
        assert result.csv == (ROOT / "results" / relative).with_suffix(".csv").read_text(encoding="utf-8")


# --- bad input: the command's words -------------------------------------------------------------------------

BAD = [
    ("plan", {"workload": "lab", "model_config": QWEN, "gpu_tokens": 1, "cpu_gib": -1}, 2),
    ("plan", {"workload": "lab", "model_config": QWEN, "gpu_tokens": 1, "gpu_gib": 1}, 2),
    ("plan", {"workload": "lab", "model_config": QWEN}, 2),
    ("plan", {"workload": "lab", "model_config": QWEN, "gpu_tokens": 1, "tp": 0}, 2),
    ("plan", {"workload": "lab", "model_config": QWEN, "gpu_tokens": 1, "tp": 3}, 2),
    ("plan", {"workload": "lab", "model_config": QWEN, "gpu_tokens": 1, "write_policy": "write-around"}, 2),
    ("plan", {"workload": "lab", "model_config": QWEN, "gpu_tokens": 1, "target_hit_ratio": 2}, 2),
    ("plan", {"workload": "lab", "model_config": QWEN, "gpu_tokens": 1, "num_documents": 3}, 2),
    ("plan", {"workload": "lab", "model_config": QWEN, "gpu_tokens": 1, "docs": "ten"}, 2),
    ("plan", {"workload": "lab", "model_config": QWEN, "gpu_tokens": 1, "cpu_gib": "0." + "0" * 18 + "1"}, 2),
    ("plan", {"workload": "lab", "model_config": "models/none/config.json", "gpu_tokens": 1}, 1),
    ("plan", {"workload": "tgi", "model_config": QWEN, "gpu_tokens": 1}, 2),
    ("replay", {"workload": "lab", "gpu_tokens": -1}, 2),
    ("replay", {"workload": "lab", "gpu_tokens": 1, "bos": True}, 2),
    ("replay", {"workload": "lab", "gpu_tokens": 1, "server": "llama-cpp", "write_policy": "write-back"}, 2),
    ("replay", {"workload": "lab", "gpu_tokens": 1, "write_policy": "write-back", "touch_cpu_on_gpu_hit": True}, 2),
    ("replay", {"workload": "lab", "gpu_tokens": 1, "partial_blocks": "keep", "gpu_eviction": "opt"}, 2),
    ("replay", {"workload": "mooncake", "trace": "data/none.jsonl", "gpu_tokens": 1}, 1),
    (
        "replay",
        {
            "workload": "mooncake",
            "trace": "data/traces/mooncake/conversation_trace.jsonl.gz",
            "gpu_tokens": 1,
            "block_tokens": 100,
        },
        2,
    ),
    ("curve", {"workload": "lab", "block_tokens": 0}, 2),
    ("curve", {"workload": "lab", "max_memory": "lots"}, 2),
    ("curve", {"workload": "lab", "max_memory": "1M", "table": False}, 1),  # table=False: kvlab mrc without --curve
    ("size", {"model_config": QWEN, "tokens": 1, "gib": 1}, 2),
    ("size", {"model_config": QWEN, "kv_dtype": "int4"}, 2),
    ("size", {"model_config": QWEN, "tp": 7}, 2),
]


@pytest.mark.parametrize(("function", "keywords", "status"), BAD)
def test_bad_input_is_refused_in_the_commands_words(function, keywords, status):
    error_class = api.SettingError if status == 2 else api.KvlabError
    with pytest.raises(error_class) as raised:
        getattr(api, function)(**keywords)
    assert isinstance(raised.value, ValueError) and raised.value.status == status
    name = FUNCTIONS[function]
    done = kvlab(name, *flags(**keywords), cwd=ROOT)
    assert (done.returncode, done.stdout) == (status, "")
    assert done.stderr == f"kvlab {name}: error: {raised.value}\n"
    if status == 2:
        assert type(raised.value) is api.SettingError


def test_a_keyword_no_function_takes_is_a_type_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'gpu'"):
        api.replay(workload="lab", gpu_tokens=1, gpu=2)
    with pytest.raises(TypeError, match="'docs' in the workload and as a keyword"):
        api.replay(workload={"source": "lab", "docs": 2}, docs=3, gpu_tokens=1)


def test_an_empty_grid_is_refused():
    with pytest.raises(api.SettingError, match="^argument --cpu-gib: expected a value or a list of values"):
        api.plan(workload="lab", model_config=QWEN, gpu_tokens=1, cpu_gib=[])


def test_results_are_frozen_and_hashable():
    result = api.size(model_config=QWEN, tokens=10)
    with pytest.raises(AttributeError):
        result.tokens = 11
    assert {result, api.size(model_config=QWEN, tokens=10)} == {result}


def test_numpy_and_pandas_values_are_taken_as_numbers():
    import numpy as np
    import pandas as pd

    by_numpy = api.plan(
        workload="lab", docs=2, model_config=QWEN, gpu_tokens=np.int64(5011), cpu_gib=np.array([0.25, 0.5])
    )
    by_python = api.plan(workload="lab", docs=2, model_config=QWEN, gpu_tokens=5011, cpu_gib=[0.25, 0.5])
    assert by_numpy == by_python
    assert (
        api.size(model_config=QWEN, tokens=pd.Series([1, 2])).to_dict()
        == api.size(model_config=QWEN, tokens=[1, 2]).to_dict()
    )


def test_a_progress_bar_is_told_every_request():
    seen = []

    class Bar:
        def __init__(self, total):
            seen.append(("total", total))

        def update(self, count):
            seen.append(("update", count))

        def close(self):
            seen.append(("close",))

    api.replay(workload="lab", docs=3, passes="fwd,fwd", gpu_tokens=1000, gpu_eviction="fifo", progress=Bar)
    assert seen[0] == ("total", 6) and seen[-1] == ("close",)
    assert sum(count for name, *count in seen if name == "update" for count in count) == 6


def test_nothing_is_written_and_nothing_said():
    before = sorted(os.listdir(ROOT))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        api.curve(workload="lab", docs=2)
        api.replay(workload="lab", docs=2, gpu_tokens=1, per_request=True)
    assert err.getvalue() == "" and sorted(os.listdir(ROOT)) == before
