"""``kvlab simulate --percentiles FILE``: the distribution of the four times in a few KB (the pipeline commits it for
every simulated point, where the per-request table would take hundreds of KB), the same as the per-request table's
percentiles, the JSON's p50, p90 and p99 among them, and nothing else changed by asking for it."""

import io
import json

import numpy as np
import pandas as pd
import pytest
from conftest import kvlab

from kvlab import api
from kvlab.api.simulates import PERCENTILES, TIMES

MODEL = ("--model-config", "models/Llama-3.1-8B-Instruct/config.json", "--gpu-system", "h100_sxm")
WORKLOAD = {"num_documents": 6, "document_length": 4000, "repeat_count": 3, "repeat_mode": "random"}
SETTINGS = {
    "latency_source": "roofline",
    "block_tokens": 256,
    "gpu_blocks": 40,
    "cpu_blocks": 200,
    "rate": 20.0,
    "output_tokens": 20,
}


def flags(**values):
    return [item for name, value in values.items() for item in (f"--{name.replace('_', '-')}", value)]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """The JSON, the per-request table and the percentiles of one run, and the JSON of the same run without them."""
    folder = tmp_path_factory.mktemp("simulate")
    common = ["simulate", "--workload", "long_doc_qa", *flags(**WORKLOAD), *MODEL, *flags(**SETTINGS)]
    table, percentiles = folder / "requests.csv", folder / "percentiles.csv"
    done = kvlab(*common, "--per-request", table, "--percentiles", percentiles)
    alone = kvlab(*common)
    assert (done.returncode, done.stderr, alone.returncode) == (0, "", 0), done.stderr + alone.stderr
    return done.stdout, pd.read_csv(table), percentiles.read_text(encoding="utf-8"), alone.stdout


def test_the_percentiles_are_the_per_request_tables(simulated):
    _, requests, text, _ = simulated
    rows = pd.read_csv(io.StringIO(text))
    assert list(rows.columns) == ["percentile", *TIMES]
    assert list(rows["percentile"]) == list(PERCENTILES) and len(text.encode()) < 5000
    for time in TIMES:
        values = requests[time].dropna().to_numpy(float)  # TPOT: a one-token answer has none
        expected = np.percentile(values, list(PERCENTILES))
        assert rows[time].to_numpy(float) == pytest.approx(expected, abs=0.06)  # the table's 0.001 ms, then 0.1 ms


def test_the_percentiles_hold_the_jsons_and_change_nothing_else(simulated):
    printed, _, text, alone = simulated
    assert printed == alone
    document = json.loads(printed)
    rows = pd.read_csv(io.StringIO(text)).set_index("percentile")
    for time in TIMES:
        for percentile in (50, 90, 99):
            assert rows.loc[percentile, time] == document[time][f"p{percentile}"], (time, percentile)


def test_the_function_keeps_the_percentiles_the_command_writes(simulated):
    printed, _, text, _ = simulated
    result = api.simulate(
        workload="long_doc_qa", **WORKLOAD, model_config=MODEL[1], gpu_system=MODEL[3], **SETTINGS, percentiles=True
    )
    assert (result.text, result.percentiles, result.per_request) == (printed, text, None)
    assert (
        api.simulate(
            workload="long_doc_qa", **WORKLOAD, model_config=MODEL[1], gpu_system=MODEL[3], **SETTINGS
        ).percentiles
        is None
    )
