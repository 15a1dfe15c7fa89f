"""Tests of ``kvlab policies`` (kvlab/cli/policies.py over kvlab/designs.py): the CPU cliff per write policy
against the lab's artifact and the write-back cliff's position, the policy table's order, bookkeeping, bound and
agreement with ``kvlab replay``, the committed artifacts, and bad input (one stderr line, nothing written)."""

import csv
import io
import json
import re
import shlex
from itertools import product

import pytest
from conftest import ROOT, kvlab, load_config
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import designs as policies
from kvlab.util.files import dump_json
from kvlab.workflow import commands, paths

WRITE_POLICIES = ["write-through", "write-back", "selective"]
EVICTIONS = ["lru", "fifo", "lfu", "arc", "opt"]
COLUMNS = [
    "block_tokens",
    "gpu_tokens",
    "cpu_tokens",
    "write_policy",
    "eviction",
    "round",
    "gpu_hit_tokens",
    "cpu_hit_tokens",
    "computed_tokens",
    "token_hit_ratio",
    "bound_token_hit_ratio",
]
FIGURES = ["gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens", "token_hit_ratio"]
GOOD_LINE = '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n'


def run_cli(*args, cwd=ROOT):
    return kvlab("policies", *args, cwd=cwd)


def run_ok(*args, out):
    """Run the command writing ``out``; it succeeds silently; return the file's text."""
    proc = run_cli(*args, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""
    return out.read_text(encoding="utf-8")


def read_table(text):
    """Header and rows (dicts of strings, empty cells as "") of a policy table."""
    assert text.endswith("\n") and "\r" not in text
    reader = csv.DictReader(io.StringIO(text))
    return reader.fieldnames, list(reader)


def replay_report(args):
    """What ``kvlab replay`` prints for ``args``, run in this process (fast enough for a whole grid)."""
    proc = kvlab("replay", *args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return json.loads(proc.stdout)


def report_rounds(report):
    """``{round: figures}`` of a replay report, "all" for the whole replay."""
    return {"all": report, **{one["round"]: one for one in report["rounds"]}}


def figures_of(row):
    return {key: float(row[key]) if key.endswith("ratio") else int(row[key]) for key in FIGURES}


# --------------------------------------------------------------------------------------------
# cliff
# --------------------------------------------------------------------------------------------


def lab_cliff_settings(config):
    """docs, tokens, passes, GPU room and recorded pass of the lab's CPU-cliff sweep."""
    sweep = config["sweeps"]["cpu_cliff"]
    lab = {**config["scenario"], **sweep["fixed"]}
    assert sweep["vary"] == "cpu" and sweep["record"]["value"] == "misses"
    return lab["docs"], lab["tokens"], sweep["passes"], lab["gpu"], sweep["record"]["pass"]


def test_cliff_write_through_is_the_lab_artifact(tmp_path, config):
    """At the lab's settings the write-through row is results/cpu_cliff.json, in the given order and JSON layout."""
    docs, tokens, passes, gpu, record = lab_cliff_settings(config)
    assert (docs, tokens, passes, gpu, record) == (10, 5011, ["fwd", "fwd"], 21520, 2)
    lab_grid = config["sweeps"]["cpu_cliff"]["grid"]
    committed = json.loads((ROOT / "results" / "cpu_cliff.json").read_text(encoding="utf-8"))
    assert list(committed) == [str(room) for room in lab_grid]  # every lab point is compared below
    # extra points (those the grid does not hold already), not sorted
    rooms = list(dict.fromkeys([30066, *reversed(lab_grid), 30065, 100000, 25055]))
    designs = ["selective", "write-through", "write-back"]
    args = ["--docs", docs, "--tokens", tokens, "--passes", ",".join(passes), "--gpu-tokens", gpu]
    args += ["--cpu-tokens", ",".join(map(str, rooms)), "--record-pass", record]
    text = run_ok("cliff", *args, "--write-policies", ",".join(designs), out=tmp_path / "cliff.json")
    cliff = json.loads(text)
    assert list(cliff) == designs
    for policy in designs:
        assert list(cliff[policy]) == [str(room) for room in rooms], policy
        assert all(type(misses) is int and 0 <= misses <= docs for misses in cliff[policy].values())
    for room in lab_grid:
        assert cliff["write-through"][str(room)] == committed[str(room)], room
    assert text == dump_json(cliff) == json.dumps(cliff, indent=2) + "\n"
    assert cliff == policies.cpu_cliff(docs, tokens, passes, gpu, rooms, designs, record)
    # The GPU holds 4 documents: write-back needs room for the other 6, write-through for all 10.
    assert (cliff["write-back"]["30065"], cliff["write-back"]["30066"]) == (10, 0)
    assert (cliff["write-through"]["50109"], cliff["write-through"]["50110"]) == (10, 0)
    assert set(cliff["selective"].values()) == {10}


def test_committed_policy_cliff(tmp_path):
    """results/policies/cpu_cliff.json is what the pipeline's command line writes today."""
    args = shlex.split(commands.job_args(load_config(), "policy_cliff"))
    text = run_ok("cliff", *args, out=tmp_path / "cliff.json")
    assert text == (ROOT / paths.POLICY_CLIFF).read_text(encoding="utf-8")


@st.composite
def cliff_cases(draw):
    """A lab scenario whose GPU holds ``k < docs`` documents, and CPU rooms around both cliffs."""
    docs = draw(st.integers(1, 12))
    tokens = draw(st.integers(1, 3000))
    held = draw(st.integers(0, docs - 1))
    gpu = draw(st.integers(held * tokens, (held + 1) * tokens - 1))
    edges = [(docs - held) * tokens, docs * tokens]
    near = [room + delta for room in edges for delta in (-1, 0) if room + delta >= 0]
    others = draw(st.lists(st.integers(0, (docs + 1) * tokens), max_size=4))
    rooms = draw(st.permutations(list(dict.fromkeys([*near, *others]))))
    return docs, tokens, held, gpu, rooms


@settings(max_examples=150, deadline=None, database=None)
@given(cliff_cases())
def test_write_back_cliff_sits_at_the_gpu_overflow(case):
    """Write-back keeps what the GPU evicts: pass 2 is whole once the CPU holds the overflow, all lost below it.

    Write-through needs room for every document; selective never stores a first computation, so pass 2 misses all.
    """
    docs, tokens, held, gpu, rooms = case
    cliff = policies.cpu_cliff(docs, tokens, ["fwd", "fwd"], gpu, rooms, WRITE_POLICIES, 2)
    assert list(cliff) == WRITE_POLICIES
    for policy in WRITE_POLICIES:
        assert list(cliff[policy]) == [str(room) for room in rooms]
    overflow = (docs - held) * tokens
    for room in rooms:
        assert cliff["write-back"][str(room)] == (0 if room >= overflow else docs), (room, overflow)
        assert cliff["write-through"][str(room)] == (0 if room >= docs * tokens else docs), room
        assert cliff["selective"][str(room)] == docs, room


# --------------------------------------------------------------------------------------------
# table
# --------------------------------------------------------------------------------------------

# Source flags and the input tokens of each round (derived from the workload's definition).
SMALL = {
    "lab": (
        ["--workload", "lab", "--docs", "4", "--tokens", "1000", "--passes", "fwd,rev,fwd"],
        {"pass1": 4000, "pass2": 4000, "pass3": 4000},
    ),
    "long_doc_qa": (
        ["--workload", "long_doc_qa", "--num-documents", "3", "--document-length", "900", "--repeat-count", "2"]
        + ["--repeat-mode", "random", "--shuffle-seed", "5"],
        {"warmup": 3 * 900, "query": 3 * 2 * 900},
    ),
}
# Grids in no sorted order: the table keeps the given one.
GRID = {"block_tokens": [256, 100], "gpu_tokens": [2000, 650], "cpu_tokens": [3000, 0, 1150]}
POLICY_ORDER = ["selective", "write-through", "write-back"]
EVICTION_ORDER = ["opt", "lru", "fifo", "lfu", "arc"]


def grid_args(grid=GRID):
    return [arg for key, values in grid.items() for arg in (f"--{key.replace('_', '-')}", ",".join(map(str, values)))]


@pytest.fixture(scope="module", params=sorted(SMALL))
def small_table(request, tmp_path_factory):
    """The table of a small workload over GRID, every design: (workload, rounds' input tokens, header, rows)."""
    source, inputs = SMALL[request.param]
    out = tmp_path_factory.mktemp("table") / "table.csv"
    designs = ["--write-policies", ",".join(POLICY_ORDER), "--evictions", ",".join(EVICTION_ORDER)]
    header, rows = read_table(run_ok("table", *source, *grid_args(), *designs, out=out))
    return request.param, inputs, header, rows


def test_table_header_and_grid_order(small_table):
    """One row per (block, gpu, cpu, write policy, eviction, round), outermost first, "all" before the rounds."""
    _, inputs, header, rows = small_table
    assert header == list(policies.TABLE_COLUMNS) == COLUMNS
    expected = product(
        *(map(str, GRID[key]) for key in ("block_tokens", "gpu_tokens", "cpu_tokens")),
        POLICY_ORDER,
        EVICTION_ORDER,
        ["all", *inputs],
    )
    assert [tuple(row[key] for key in COLUMNS[:6]) for row in rows] == list(expected)


def test_table_bookkeeping(small_table):
    """Every input token of a round is served by one tier or computed; the ratio follows from the counts."""
    _, inputs, _, rows = small_table
    inputs = {"all": sum(inputs.values()), **inputs}
    for row in rows:
        one = figures_of(row)
        assert min(one["gpu_hit_tokens"], one["cpu_hit_tokens"], one["computed_tokens"]) >= 0, row
        assert one["gpu_hit_tokens"] + one["cpu_hit_tokens"] + one["computed_tokens"] == inputs[row["round"]], row
        hits = one["gpu_hit_tokens"] + one["cpu_hit_tokens"]
        assert one["token_hit_ratio"] == round(hits / inputs[row["round"]], 6), row
    assert any(int(row["cpu_hit_tokens"]) > 0 for row in rows)  # the CPU tier serves somewhere: not vacuous


def test_table_bound(small_table):
    """The bound sits on the "all" rows only, one value per rooms, is one opt tier of G//B + C//B blocks, and no
    design beats it over the whole workload."""
    workload, _, _, rows = small_table
    source = SMALL[workload][0]
    by_rooms = {}
    for row in rows:
        assert (row["bound_token_hit_ratio"] != "") == (row["round"] == "all"), row
        if row["round"] == "all":
            by_rooms.setdefault((row["block_tokens"], row["gpu_tokens"], row["cpu_tokens"]), []).append(row)
    assert len(by_rooms) == 12
    for (block, gpu, cpu), alls in by_rooms.items():
        assert len(alls) == len(POLICY_ORDER) * len(EVICTION_ORDER)
        bounds = {row["bound_token_hit_ratio"] for row in alls}
        assert len(bounds) == 1, bounds
        bound = float(bounds.pop())
        for row in alls:
            assert float(row["token_hit_ratio"]) <= bound, row
        block = int(block)
        room = (int(gpu) // block + int(cpu) // block) * block
        one_tier = ["--gpu-tokens", room, "--block-tokens", block, "--gpu-eviction", "opt"]
        assert replay_report([*source, *one_tier])["token_hit_ratio"] == bound, (block, gpu, cpu)
    assert any(float(alls[0]["bound_token_hit_ratio"]) > 0 for alls in by_rooms.values())


def point(row):
    """The rooms and design of a table row."""
    return tuple(row[key] for key in COLUMNS[:5])


def test_table_write_through_lru_is_replay_cli(small_table):
    """The write-through/lru rows are what ``kvlab replay`` prints for the same workload and rooms."""
    workload, inputs, _, rows = small_table
    source = SMALL[workload][0]
    for block, gpu, cpu in product(*GRID.values()):
        expected = report_rounds(
            replay_report([*source, "--gpu-tokens", gpu, "--cpu-tokens", cpu, "--block-tokens", block])
        )
        assert list(expected) == ["all", *inputs]
        wanted = (str(block), str(gpu), str(cpu), "write-through", "lru")
        mine = {row["round"]: row for row in rows if point(row) == wanted}
        assert list(mine) == list(expected)
        for name, row in mine.items():
            assert figures_of(row) == {key: expected[name][key] for key in FIGURES}, (block, gpu, cpu, name)


def test_table_every_design_is_replay(small_table):
    """Every (write policy, eviction) row is ``kvlab replay``'s figures with that policy and eviction on both tiers."""
    workload, _, _, rows = small_table
    source = SMALL[workload][0]
    table = {tuple(row[key] for key in COLUMNS[:6]): figures_of(row) for row in rows}
    for block, gpu, cpu, policy, eviction in product(*GRID.values(), POLICY_ORDER, EVICTION_ORDER):
        cache = ["--gpu-tokens", gpu, "--cpu-tokens", cpu, "--block-tokens", block, "--write-policy", policy]
        cache += ["--gpu-eviction", eviction, "--cpu-eviction", eviction]
        for name, one in report_rounds(replay_report([*source, *cache])).items():
            key = (str(block), str(gpu), str(cpu), policy, eviction, name)
            assert table[key] == {figure: one[figure] for figure in FIGURES}, key


def test_table_switches_apply_to_write_through_only(tmp_path):
    """LMCache's switches change the write-through rows (as ``kvlab replay``'s) and leave the others alone."""
    source = ["--workload", "lab", "--docs", "4", "--tokens", "1000", "--passes", "fwd,fwd,rev,fwd"]
    grid = {"gpu_tokens": [2000], "cpu_tokens": [2560], "block_tokens": [256]}
    designs = ["--write-policies", "write-through,write-back,selective", "--evictions", "lru,fifo"]
    _, plain = read_table(run_ok("table", *source, *grid_args(grid), *designs, out=tmp_path / "plain.csv"))
    switch = "--touch-cpu-on-gpu-hit"
    _, touched = read_table(run_ok("table", *source, *grid_args(grid), *designs, switch, out=tmp_path / "t.csv"))
    assert len(plain) == len(touched) == 3 * 2 * 5
    for before, after in zip(plain, touched, strict=True):
        if after["write_policy"] != "write-through":
            assert after == before
        else:
            cache = ["--gpu-tokens", 2000, "--cpu-tokens", 2560, "--block-tokens", 256, switch]
            cache += ["--gpu-eviction", after["eviction"], "--cpu-eviction", after["eviction"]]
            expected = report_rounds(replay_report([*source, *cache]))[after["round"]]
            assert figures_of(after) == {key: expected[key] for key in FIGURES}
    changed = [row for row, old in zip(touched, plain, strict=True) if figures_of(row) != figures_of(old)]
    assert changed and {row["write_policy"] for row in changed} == {"write-through"}


@pytest.mark.parametrize("workload", load_config()["policies"]["tables"]["workloads"])
def test_committed_policy_tables(tmp_path, workload):
    """results/policies/<workload>.csv is what the pipeline's command line writes today."""
    args = shlex.split(commands.job_args(load_config(), "policy_table", workload=workload))
    text = run_ok("table", *args, out=tmp_path / "table.csv")
    assert text == (ROOT / paths.policy_table_path(workload)).read_text(encoding="utf-8")


def test_no_bound_is_claimed_when_partial_blocks_are_kept(tmp_path):
    """Kept partial blocks have other sizes, for which MIN is no bound: the column stays empty rather than wrong.

    One 100-token document read twice through a 256-token block: with partial blocks kept, the GPU serves the
    second read whole (ratio 0.5 over both passes), which a bound from full blocks only would wrongly put at 0.
    """
    args = ["--workload", "lab", "--docs", "1", "--tokens", "100", "--passes", "fwd,fwd", "--partial-blocks", "keep"]
    args += ["--gpu-tokens", "256", "--cpu-tokens", "0", "--block-tokens", "256"]
    args += ["--write-policies", "write-through", "--evictions", "lru"]
    _, rows = read_table(run_ok("table", *args, out=tmp_path / "keep.csv"))
    (all_row,) = [row for row in rows if row["round"] == "all"]
    assert float(all_row["token_hit_ratio"]) == 0.5
    assert all(row["bound_token_hit_ratio"] == "" for row in rows)


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------

CLIFF = ["cliff", "--docs", "3", "--tokens", "10", "--passes", "fwd,fwd", "--gpu-tokens", "10", "--cpu-tokens", "0,30"]
CLIFF += ["--record-pass", "2", "--write-policies", "write-through,write-back"]
TABLE = ["table", "--workload", "lab", "--docs", "3", "--tokens", "300", "--passes", "fwd,fwd"]
TABLE += ["--gpu-tokens", "256", "--cpu-tokens", "0,512", "--block-tokens", "256"]
TABLE += ["--write-policies", "write-through,write-back", "--evictions", "lru,opt"]
MOONCAKE = ["table", "--workload", "mooncake", "--trace", "{tmp}/t.jsonl", "--gpu-tokens", "512", "--cpu-tokens", "0"]
MOONCAKE += ["--block-tokens", "512", "--write-policies", "write-through", "--evictions", "lru"]
LONG_DOC_QA = ["table", "--workload", "long_doc_qa", "--gpu-tokens", "256", "--cpu-tokens", "0"]
LONG_DOC_QA += ["--block-tokens", "256", "--write-policies", "write-through", "--evictions", "lru"]


def setting(base, flag, value=None):
    """``base`` with ``flag`` set to ``value`` (replaced where present, else appended; a bare flag without value)."""
    args = list(base)
    if flag in args and value is not None:
        args[args.index(flag) + 1] = value
        return args
    return [*args, flag] if value is None else [*args, flag, value]


def check_one_line_error(proc, status, command=None):
    """One line, exit ``status``; with ``command`` (cliff or table) the line starts with that subcommand's prog
    (but for an unknown flag, which argparse reports from the top parser)."""
    assert proc.returncode == status, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1, proc.stderr
    assert re.match(r"kvlab policies( cliff| table)?: error: ", proc.stderr), proc.stderr  # a subcommand's own prog
    if command in ("cliff", "table") and "unrecognized arguments" not in proc.stderr:  # argparse's top parser's
        assert proc.stderr.startswith(f"kvlab policies {command}: error: "), proc.stderr
    assert "Traceback" not in proc.stderr


def run_bad(tmp_path, args, status, fragments, old=None, trace=GOOD_LINE):
    """Run a failing command: exit ``status``, one line naming ``fragments``; --out not created, or kept as it was."""
    (tmp_path / "t.jsonl").write_text(trace, encoding="utf-8")
    out = tmp_path / "out.file"
    if old is not None:
        out.write_text(old, encoding="utf-8")
    proc = run_cli(*[str(arg).format(tmp=tmp_path) for arg in args], "--out", out)
    check_one_line_error(proc, status, args[0] if args else None)
    for fragment in fragments:
        assert fragment.format(tmp=tmp_path) in proc.stderr, (fragment, proc.stderr)
    leftovers = sorted(path.name for path in tmp_path.iterdir())
    assert leftovers == (["out.file", "t.jsonl"] if old is not None else ["t.jsonl"])
    if old is not None:
        assert out.read_text(encoding="utf-8") == old
    return proc


VALID_WRITE = "write-through, write-back, selective"
VALID_EVICTION = "lru, fifo, lfu, arc, opt"
USAGE_ERRORS = [
    (setting(CLIFF, "--write-policies", "write-through,write-around"), ["'write-around'", VALID_WRITE]),
    (setting(TABLE, "--write-policies", "lru"), ["'lru'", VALID_WRITE]),
    (setting(TABLE, "--evictions", "lru,mru"), ["'mru'", VALID_EVICTION]),
    (setting(TABLE, "--evictions", "LRU"), ["'LRU'", VALID_EVICTION]),
    (setting(CLIFF, "--write-policies", "write-back,write-back"), ["twice"]),
    (setting(TABLE, "--write-policies", "selective, selective"), ["twice"]),
    (setting(TABLE, "--evictions", "lru,opt,lru"), ["twice"]),
    (setting(CLIFF, "--cpu-tokens", "0,30,0"), ["twice"]),
    (setting(TABLE, "--cpu-tokens", "512,0,512"), ["twice"]),
    (setting(TABLE, "--block-tokens", "256,256"), ["twice"]),
    (setting(CLIFF, "--cpu-tokens", "0,-30"), ["--cpu-tokens", "-30"]),
    (setting(CLIFF, "--gpu-tokens", "-1"), ["--gpu-tokens", "-1"]),
    (setting(TABLE, "--gpu-tokens", "256,-256"), ["--gpu-tokens", "-256"]),
    (setting(CLIFF, "--cpu-tokens", "0,1.5"), ["--cpu-tokens", "1.5"]),
    (setting(TABLE, "--cpu-tokens", "ten"), ["--cpu-tokens", "ten"]),
    (setting(TABLE, "--gpu-tokens", "256,"), ["--gpu-tokens"]),
    (setting(TABLE, "--block-tokens", "0"), ["--block-tokens"]),
    (setting(CLIFF, "--tokens", "0"), ["--tokens"]),
    (setting(CLIFF, "--docs", "2.0"), ["--docs", "2.0"]),
    (setting(CLIFF, "--passes", "fwd,bwd"), ["--passes"]),
    (setting(TABLE, "--evictions", "opt") + ["--partial-blocks", "keep"], ["opt", "partial_blocks"]),
    (setting(TABLE, "--evictions", "lru,arc") + ["--partial-blocks", "keep"], ["arc", "partial_blocks"]),
    (setting(CLIFF, "--record-pass", "3"), ["--record-pass 3", "2"]),
    (setting(CLIFF, "--record-pass", "0"), ["--record-pass"]),
    (setting(TABLE, "--num-documents", "3"), ["--num-documents", "long_doc_qa"]),
    (setting(TABLE, "--trace", "x.jsonl"), ["--trace", "mooncake"]),
    (setting(MOONCAKE, "--docs", "3"), ["--docs"]),
    (setting(MOONCAKE, "--block-tokens", "500"), ["500"]),
    (setting(LONG_DOC_QA, "--repeat-mode", "zig"), ["--repeat-mode", "zig"]),
    (setting(LONG_DOC_QA, "--num-documents", "-2"), ["--num-documents"]),
    (setting(CLIFF, "--touch-cpu-on-gpu-hit"), ["--touch-cpu-on-gpu-hit"]),
    (setting(TABLE, "--workload", "nope"), ["nope"]),
    ([], ["command"]),
    (["plot"], ["plot"]),
    (CLIFF[:-2], ["--write-policies"]),
]


@pytest.mark.parametrize("args, fragments", USAGE_ERRORS, ids=repr)
def test_usage_errors(tmp_path, args, fragments):
    """A bad setting is a usage error: exit 2, one line naming the culprit, no --out file."""
    run_bad(tmp_path, args, 2, fragments)


def test_mooncake_block_grid_is_checked_before_replaying(tmp_path):
    """A block size the trace cannot be cut into is a usage error wherever it stands in the grid, as alone."""
    run_bad(tmp_path, setting(MOONCAKE, "--block-tokens", "500"), 2, ["500"])
    run_bad(tmp_path, setting(MOONCAKE, "--block-tokens", "512,500"), 2, ["500"])


def test_switches_with_other_write_policies_in_the_table_run(tmp_path):
    """The LMCache switches are fine beside write-back and selective in the table: they go to write-through only."""
    args = setting(setting(TABLE, "--touch-cpu-on-gpu-hit"), "--re-store-on-gpu-hit")
    args = setting(setting(args, "--evictions", "lru,opt"), "--write-policies", "write-back,write-through,selective")
    _, rows = read_table(run_ok(*args, out=tmp_path / "t.csv"))
    per_rooms = ["write-back", "write-back", "write-through", "write-through", "selective", "selective"]
    assert [row["write_policy"] for row in rows if row["round"] == "all"] == per_rooms * 2  # two CPU rooms


@pytest.mark.parametrize("block", ["512", "1024"])
def test_bad_trace_line(tmp_path, block):
    """A malformed trace line is bad input: exit 1, one line naming file:line, no --out file."""
    args = [arg.format(tmp=tmp_path) for arg in setting(MOONCAKE, "--block-tokens", block)]
    (tmp_path / "t.jsonl").write_text(GOOD_LINE, encoding="utf-8")
    run_ok(*args, out=tmp_path / "good.csv")  # the first line alone replays fine
    (tmp_path / "good.csv").unlink()
    fragment = "{tmp}/t.jsonl:2: missing field(s): input_length"
    run_bad(tmp_path, args, 1, [fragment], trace=GOOD_LINE + '{"timestamp": 1}\n')


def test_absent_trace(tmp_path):
    """A trace that cannot be read is bad input too: exit 1, one line naming the file."""
    run_bad(tmp_path, setting(MOONCAKE, "--trace", "{tmp}/absent.jsonl"), 1, ["{tmp}/absent.jsonl", "cannot read"])


@pytest.mark.parametrize(
    "args, status",
    [
        (setting(CLIFF, "--write-policies", "write-around"), 2),
        (setting(TABLE, "--evictions", "opt") + ["--partial-blocks", "keep"], 2),
        (setting(CLIFF, "--record-pass", "3"), 2),
        (setting(TABLE, "--docs", "x"), 2),
        (setting(MOONCAKE, "--trace", "{tmp}/absent.jsonl"), 1),
    ],
    ids=repr,
)
def test_failure_keeps_an_existing_out_file(tmp_path, args, status):
    """A failed run leaves an existing --out file as it was, and no temporary file beside it."""
    run_bad(tmp_path, args, status, [], old="old content\n")


@pytest.mark.parametrize("command", [CLIFF, TABLE])
@pytest.mark.parametrize("where", ["missing/out.file", "folder"])
def test_unwritable_out(tmp_path, command, where):
    """An --out that cannot be written: exit 1, one line, nothing created or left behind."""
    (tmp_path / "folder").mkdir()
    proc = run_cli(*command, "--out", tmp_path / where)
    check_one_line_error(proc, 1, command[0])
    assert "cannot write" in proc.stderr and str(tmp_path / where) in proc.stderr
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["folder"]


def test_an_out_file_that_is_the_trace_is_refused(tmp_path):
    """--out naming the trace would overwrite an input: a usage error (exit 2), the trace unchanged."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(GOOD_LINE, encoding="utf-8")
    args = [arg.format(tmp=tmp_path) for arg in MOONCAKE]
    proc = run_cli(*args, "--out", trace)
    check_one_line_error(proc, 2, "table")
    assert "both an input and an output" in proc.stderr
    assert trace.read_text(encoding="utf-8") == GOOD_LINE
    assert sorted(path.name for path in tmp_path.iterdir()) == ["t.jsonl"]


@pytest.mark.parametrize(
    "args, fragments",
    [
        (setting(CLIFF, "--gpu-tokens", str(2**53 + 1)), ["--gpu-tokens", f"<= {2**53}"]),
        (setting(TABLE, "--cpu-tokens", f"0,{2**53 + 1}"), ["--cpu-tokens", f"<= {2**53}"]),
        (setting(CLIFF, "--docs", str(10**8 + 1)), ["200000002", "at most 100000000"]),
        (setting(TABLE, "--docs", str(10**8)), ["at most 100000000"]),
    ],
    ids=repr,
)
def test_limits_are_usage_errors(tmp_path, args, fragments):
    """A number beyond 2**53, or a lab workload beyond 10**8 block accesses: exit 2 before any replay."""
    run_bad(tmp_path, args, 2, fragments)
