"""`kvlab check`'s output (kvlab/cli/check.py, kvlab/workflow/freshness.py): one line saying what it compared when
results/ is up to date, and repair lines whose paths are quoted for the shell, whatever a file under results/ is called.

The regeneration itself (a full pipeline run) is tests/test_workflow.py's; here it is stood in for.
"""

import shlex
import subprocess

import pytest
from conftest import kvlab

from kvlab.cli import check as check_cli
from kvlab.workflow import freshness

# Names a file under results/ may have that a shell would read as more than a path.
HOSTILE = [
    "results/$(touch pwned).json",
    "results/`touch pwned`.json",
    "results/a b; touch pwned &.json",
    'results/it\'s "quoted" | cat > pwned.json',
    "results/*?[x]~{a,b}\\n!#.json",
]


def repair(line):
    """The repair command of a check line."""
    assert line.count("; repair: ") == 1, line
    return line.split("; repair: ")[1]


@pytest.mark.parametrize("name", HOSTILE)
def test_an_extra_files_repair_gives_its_path_back_to_the_shell(name):
    (line,) = freshness.compare({name: b"x"}, {})
    assert line.startswith(f"{name}: not made by the pipeline; ")
    assert shlex.split(repair(line)) == ["rm", name]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_differing_files_repair_gives_its_path_back_to_the_shell(name):
    """Make would split the name and expand its ``$`` whatever the quotes: such a file is rerun by kvlab run."""
    (line,) = freshness.compare({name: b"x"}, {name: b"y"})
    assert line.startswith(f"{name}: differs from a fresh regeneration; ")
    assert shlex.split(repair(line)) == [".venv/bin/kvlab", "run", "--", "--forcerun", name]


@pytest.mark.parametrize("name", HOSTILE)
def test_the_repair_removes_the_file_and_runs_nothing_else(tmp_path, name):
    """The rm line, run by a shell: the file is gone, and nothing the name spells was run."""
    (tmp_path / "results").mkdir()
    (tmp_path / name).write_text("x\n", encoding="utf-8")
    (line,) = freshness.compare({name: b"x"}, {})
    done = subprocess.run(["sh", "-c", repair(line)], cwd=tmp_path, capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["results"]


def test_plain_names_keep_their_repair_lines():
    present = {"results/a.json": b"1", "results/b.json": b"1", "results/extra.json": b"1"}
    fresh = {"results/a.json": b"2", "results/b.json": b"1", "results/c.json": b"1"}
    assert freshness.compare(present, fresh) == [
        "results/a.json: differs from a fresh regeneration; repair: make run FORCE=results/a.json",
        "results/c.json: missing; repair: make run",
        "results/extra.json: not made by the pipeline; repair: rm results/extra.json",
    ]


def test_check_counts_every_artifact_it_compared(tmp_path, monkeypatch):
    """Those under results/ and those a regeneration makes, each once."""
    scratch = tmp_path / "scratch"
    for folder, names in ((tmp_path, ("a", "b")), (scratch, ("b", "c"))):
        (folder / "results").mkdir(parents=True)
        for name in names:
            (folder / "results" / f"{name}.json").write_text("{}\n", encoding="utf-8")
    monkeypatch.setattr(freshness, "regenerate", lambda folder, scratch_folder: scratch)
    lines, compared = freshness.check(tmp_path, scratch)
    assert compared == 3 and len(lines) == 2
    assert freshness.differences(tmp_path, scratch) == lines


def fake_check(lines, compared):
    def check():
        return lines, compared

    return check


def test_an_up_to_date_check_says_what_it_compared(monkeypatch):
    monkeypatch.setattr(freshness, "check", fake_check([], 214))
    done = kvlab("check")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "kvlab check: 214 artifacts in results/ match a regeneration from the committed code and config\n"
    )
    assert (
        check_cli.ok(1)
        == "kvlab check: 1 artifact in results/ matches a regeneration from the committed code and config"
    )


def test_a_failed_check_prints_only_its_differences(monkeypatch):
    lines = [
        "results/a.json: missing; repair: make run",
        "results/b.json: not made by the pipeline; repair: rm results/b.json",
    ]
    monkeypatch.setattr(freshness, "check", fake_check(lines, 2))
    done = kvlab("check")
    assert (done.returncode, done.stdout, done.stderr) == (1, "".join(f"{line}\n" for line in lines), "")


def test_a_failed_regeneration_is_one_line(monkeypatch):
    def broken():
        raise RuntimeError("regenerating results/ failed: a | b | c")

    monkeypatch.setattr(freshness, "check", broken)
    done = kvlab("check")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "kvlab check: error: regenerating results/ failed: a | b | c\n"
