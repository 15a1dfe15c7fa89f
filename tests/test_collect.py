"""The sweep collector (``kvlab collect``, kvlab/report/sweep.py) folds per-point scenario outputs into one
artifact, in grid order."""

import json
import os
import stat

import pytest
from conftest import kvlab

from kvlab import scenario
from kvlab.report.sweep import collect


def write_point(folder, value, **settings):
    path = folder / f"{value}.json"
    path.write_text(json.dumps(scenario.run(**settings)), encoding="utf-8")
    return path


def test_hits_and_misses_of_the_recorded_pass(tmp_path):
    # gpu 3 tokens, docs of 1 token: fwd,rev → pass 2 hits docs 2,1,0 (3 hits, 0 misses)
    point = write_point(tmp_path, 3, gpu=3, cpu=0, docs=3, tokens=1, passes=["fwd", "rev"])
    assert collect([point], 2, "hits") == {"3": 3}
    assert collect([point], 2, "misses") == {"3": 0}
    assert collect([point], 1, "misses") == {"3": 3}


def test_hits_count_cpu_loads_too(tmp_path):
    point = write_point(tmp_path, 0, gpu=1, cpu=10, docs=4, tokens=1, passes=["fwd", "fwd"])
    assert collect([point], 2, "hits") == {"0": 4}


def test_keeps_the_order_it_is_given(tmp_path):
    values = [50, 7, 300, 0]
    points = [write_point(tmp_path, v, gpu=v, cpu=0, docs=5, tokens=10, passes=["fwd", "fwd"]) for v in values]
    assert list(collect(points, 2, "hits")) == ["50", "7", "300", "0"]
    assert collect(points, 2, "hits") == {"50": 5, "7": 0, "300": 5, "0": 0}


def test_rejects_a_pass_the_points_do_not_have(tmp_path):
    point = write_point(tmp_path, 1, gpu=1, cpu=0, docs=1, tokens=1, passes=["fwd"])
    with pytest.raises(ValueError, match="has 1 pass"):
        collect([point], 2, "hits")


def test_rejects_a_grid_value_twice(tmp_path):
    point = write_point(tmp_path, 1, gpu=1, cpu=0, docs=1, tokens=1, passes=["fwd"])
    with pytest.raises(ValueError, match="appears twice"):
        collect([point, point], 1, "hits")


def test_cli_writes_the_artifact_layout(tmp_path):
    points = [write_point(tmp_path, v, gpu=v, cpu=0, docs=2, tokens=1, passes=["fwd", "fwd"]) for v in (2, 1)]
    out = tmp_path / "sweep.json"
    done = kvlab("collect", "--pass", 2, "--value", "misses", "--out", out, *points)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == b'{\n  "2": 0,\n  "1": 2\n}\n'
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~mask  # the umask's mode, as any new file
    assert not [path for path in tmp_path.iterdir() if path.name.endswith(".tmp")]


def test_cli_bad_point_is_one_line_and_no_output(tmp_path):
    bad = tmp_path / "5.json"
    bad.write_text("{}", encoding="utf-8")
    out = tmp_path / "sweep.json"
    done = kvlab("collect", "--pass", 1, "--value", "hits", "--out", out, bad)
    assert done.returncode == 1
    assert done.stderr.startswith("kvlab collect: error: ")
    assert done.stderr.count("\n") == 1 and "5.json" in done.stderr
    assert not out.exists()


@pytest.mark.parametrize("bad", [["--pass", "x"], ["--value", "ratio"], []])
def test_cli_bad_arguments_are_one_line(tmp_path, bad):
    point = write_point(tmp_path, 1, gpu=1, cpu=0, docs=1, tokens=1, passes=["fwd"])
    args = {"--pass": "1", "--value": "hits", **dict(zip(bad[::2], bad[1::2], strict=True))}
    if not bad:
        args.pop("--value")
    out = tmp_path / "sweep.json"
    done = kvlab("collect", *[x for pair in args.items() for x in pair], "--out", out, point)
    assert done.returncode == 2
    assert done.stderr.startswith("kvlab collect: error: ")
    assert done.stderr.count("\n") == 1 and "error" in done.stderr
    assert not out.exists()


def test_cli_refuses_an_output_that_is_a_point(tmp_path):
    """--out naming one of the points would overwrite an input: a usage error (exit 2), the point unchanged."""
    points = [write_point(tmp_path, v, gpu=v, cpu=0, docs=2, tokens=1, passes=["fwd", "fwd"]) for v in (2, 1)]
    before = points[1].read_bytes()
    done = kvlab("collect", "--pass", 1, "--value", "hits", "--out", points[1], *points)
    assert done.returncode == 2
    assert done.stderr.startswith("kvlab collect: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "both an input and an output" in done.stderr
    assert points[1].read_bytes() == before
