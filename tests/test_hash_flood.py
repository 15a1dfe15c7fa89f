"""Hash flooding: ids crafted to share one slot of a fixed hash cost kvlab's interner (kvlab/workloads/dense.py) no more
lookups than random ids, end to end through ``kvlab replay``, and the ids it gives are the same whatever its
random tables (first appearance, checked against a dict)."""

import importlib.util
import json

import numpy as np
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.cli import main
from kvlab.workloads import dense
from kvlab.workloads.dense import Interner, random_tables

spec = importlib.util.spec_from_file_location("hash_flood", ROOT / "bench" / "hash_flood.py")
hash_flood = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hash_flood)


def test_the_crafted_ids_do_flood_the_fixed_hash():
    """The attack is real: under the replaced Fibonacci hash every crafted id probes past all before it."""
    ids = hash_flood.crafted(2000)
    assert len(set(ids.tolist())) == len(ids)
    assert hash_flood._fixed(ids, 1 << 12) == len(ids) * (len(ids) + 1) // 2


def probes_per_lookup(monkeypatch, trace, tmp_path):
    """``kvlab replay`` on ``trace`` (its lines: lists of hash ids), and the interner's mean probes per lookup."""
    path = tmp_path / "trace.jsonl"
    lines = [
        {"timestamp": i, "input_length": 512 * len(ids), "output_length": 1, "hash_ids": ids}
        for i, ids in enumerate(trace)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    seen = []
    original = Interner.dense

    def spy(self, hashes):
        out = original(self, hashes)
        seen.append(self)
        return out

    monkeypatch.setattr(dense.Interner, "dense", spy)
    code = main(
        ["replay", "--workload", "mooncake", "--trace", str(path), "--gpu-tokens", "51200", "--cpu-tokens", "0"]
    )
    assert code == 0
    interner = seen[-1]
    return interner.probes / sum(map(len, trace)), interner.count


def test_crafted_ids_cost_no_more_than_random_ones_end_to_end(monkeypatch, tmp_path, capsys):
    """60,000 crafted ids through the command: a lookup looks at about one slot (a fixed hash: 30,000 each)."""
    crafted = hash_flood.crafted(60_000).tolist()
    rng = np.random.default_rng(3)
    random = rng.integers(-(2**63), 2**63, 60_000).tolist()
    per_request = 4
    crafted_cost, crafted_keys = probes_per_lookup(
        monkeypatch, [crafted[i : i + per_request] for i in range(0, len(crafted), per_request)], tmp_path
    )
    random_cost, random_keys = probes_per_lookup(
        monkeypatch, [random[i : i + per_request] for i in range(0, len(random), per_request)], tmp_path
    )
    assert crafted_keys == random_keys == 60_000
    assert crafted_cost < 3 and random_cost < 3  # linear probing at most half full: about 1.3 expected
    assert crafted_cost < 2 * random_cost


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=300), st.integers(1, 64))
def test_dense_ids_are_first_appearance_whatever_the_tables(values, batch):
    """The ids are the order of first appearance (a dict's), the same under two random draws of the tables and
    across the table's growth (it starts at 2 slots)."""
    expected = {}
    for value in values:
        expected.setdefault(value, len(expected))
    for _ in range(2):
        interner = Interner(slots=2, tables=random_tables())
        got = [
            int(i)
            for start in range(0, len(values), batch)
            for i in interner.dense(np.array(values[start : start + batch], dtype=np.int64))
        ]
        assert got == [expected[value] for value in values]
        assert interner.count == len(expected)
