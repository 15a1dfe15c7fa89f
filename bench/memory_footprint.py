"""Is ``--max-memory``'s projection (``kvlab/util/memory.py``) never below what a command really holds?

For each command and synthetic Mooncake trace: the command's peak resident memory (``VmHWM``, read by its own
process as it ends) above start-up (``kvlab replay``'s peak on a tiny trace: Python, numpy, numba and the kernels;
what a command imports besides, pandas for a CSV, counts as held), beside the largest total its meter projected as
it read (``Meter.projected``) and their ratio, which must be at least 1; for the commands whose footprint is
declared where issue 22 item 11 could not change it (``kvlab/cli/replay.py``, ``kvlab/curves/mrc.py``), also the
projection of the footprint proposed here. The rooms are a GPU of 200 blocks and a CPU that keeps every block (the
most a reference engine holds). The traces are written once to ``--out`` (default ``/tmp/kvlab-memory``),
deterministic, of five shapes:

* ``conv``: conversation-like, 24 blocks a request on average, 70% of the requests extending the prefix of a
  recent one (about 3 distinct blocks in 4 accesses);
* ``fresh``: every block new (a distinct block per access: the most a trace costs per access);
* ``short``: 3 blocks a request on average, sharing as ``conv`` (the most requests per access);
* ``same``: every request a prefix of the same 47 blocks (the fewest distinct blocks, and the shortest ids: the
  most ids in a batch of the reader, which the hash table of dense ids makes room for at once);
* ``loop``: ``conv``'s requests read five times over (every block accessed again and again: what a design keeps
  per stored block at its most, Belady's stale heap entries included).

Then, per command, a least-squares fit of the peaks to a constant and bytes per access, request and distinct block
(the mean, where a footprint must be the most), beside the footprint the command declares. Tables in Markdown.

Usage: ``.venv/bin/python bench/memory_footprint.py [--sizes 1m,4m] [--shapes conv,fresh,short,same,loop]
[--commands "replay,mrc --curve,..."] [--out DIR]``. One command runs at a time; at 4 M accesses ``policies table``
peaks at about 1.4 GB, the others under 0.6 GB; all commands on all shapes at 1m and 4m take about 20 minutes on
2 cores.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvlab.cache.compiled import FOOTPRINT  # noqa: E402
from kvlab.cache.eviction import EVICTION_POLICIES  # noqa: E402
from kvlab.cache.write_policies import WRITE_POLICIES  # noqa: E402
from kvlab.cli.policies import PANDAS_BYTES  # noqa: E402
from kvlab.util.memory import Footprint, Meter  # noqa: E402
from kvlab.workloads import MooncakeWorkload  # noqa: E402

MODEL_CONFIG = ROOT / "models" / "Qwen2.5-7B-Instruct" / "config.json"
TTFT_MODEL = ROOT / "results" / "ttft" / "model.json"
BLOCK = 512
# Mean blocks a request, the share of requests that extend a recent one's prefix (None: all the same prefix), and
# how many times the requests are read, one pass after another.
SHAPES = {
    "conv": (24, 0.7, 1),
    "fresh": (24, 0.0, 1),
    "short": (3, 0.7, 1),
    "same": (24, None, 1),
    "loop": (24, 0.7, 5),
}
TINY = 1000  # accesses of the start-up trace (one batch)

# What kvlab/cli/replay.py's --per-request table takes a request: its columns while the replay runs (4 x 8, and 32 of
# what was served), joined (48), pandas' frame of them and its renamed copy (2 x 56), the round's names (8), the
# computed tokens (8), the CSV text (about 60 bytes a row) in pandas' buffer, as a str and as written bytes (180).
ROW_BYTES = 64 + 48 + 112 + 16 + 180
# What kvlab/curves/mrc.py's curve holds at its worst: per access its dense key and the Fenwick tree (4 + 4), or the
# batches beside their concatenation (4 + 4), with 4 to spare; per request its columns and what the GPU served (72);
# per distinct block the hash table of dense ids while it doubles (72, as the compiled replay's), or the levels (8)
# and the curve made of them (up to 6 x 8 a level) beside the GPU's state (24) and its latest access (4): 88; fixed,
# the reader's batch and the table's room for it, as the replay's.
MRC = Footprint(access=12, request=72, key=88, fixed=FOOTPRINT.fixed)

# Run in the measured process: record the meter's largest projection, run the command, write both with VmHWM.
CHILD = """
import json, sys
import kvlab.util.memory as memory
meters = []
init = memory.Meter.__init__
def register(self, *args, **kwargs):
    init(self, *args, **kwargs)
    meters.append(self)
memory.Meter.__init__ = register
from kvlab.cli import main
code = main(sys.argv[2:])
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
peak = int(status["VmHWM"].split()[0]) * 1024
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "peak": peak, "projected": max((m.projected for m in meters), default=None)}, out)
"""


def accesses_of(size):
    """``4m`` -> 4,000,000; ``250k`` -> 250,000."""
    units = {"k": 10**3, "m": 10**6}
    return int(float(size[:-1]) * units[size[-1].lower()]) if size[-1].lower() in units else int(size)


def write_trace(path, accesses, shape, seed=1):
    """A Mooncake-format trace of about ``accesses`` block accesses of ``shape`` (see the module's docstring);
    returns ``(requests, accesses, distinct blocks)``."""
    mean, share, passes = SHAPES[shape]
    rng = np.random.default_rng(seed)
    recent, lines, fresh, total = [], [], 0, 0
    while total * passes < accesses:
        blocks = int(rng.integers(1, 2 * mean))
        shared = []
        if share is None:  # every request a prefix of one: few distinct blocks, the shortest ids
            shared = list(range(blocks))
        elif recent and rng.random() < share:  # a prefix of a recent request (hash ids are chained)
            parent = recent[int(rng.integers(len(recent)))]
            shared = parent[: min(int(rng.integers(1, len(parent) + 1)), blocks)]
        ids = shared + list(range(fresh, fresh + blocks - len(shared)))
        fresh = max(fresh + blocks - len(shared), ids[-1] + 1)
        tokens = BLOCK * (blocks - 1) + int(rng.integers(1, BLOCK + 1))
        lines.append((tokens, ", ".join(map(str, ids))))
        recent = [*recent[-1999:], ids] if len(recent) >= 2000 else [*recent, ids]
        total += blocks
    with open(path, "w") as out:
        for number, (tokens, ids) in enumerate(lines * passes):
            out.write(
                f'{{"timestamp": {number}, "input_length": {tokens}, "output_length": 100, "hash_ids": [{ids}]}}\n'
            )
    return len(lines) * passes, total * passes, fresh


def ensure_trace(folder, size, shape):
    """The trace of ``size`` and ``shape`` in ``folder``, written once; ``(path, requests, accesses, keys)``."""
    path = folder / f"{shape}-{size}.jsonl"
    meta = path.with_suffix(".meta.json")
    if not (path.is_file() and meta.is_file()):
        counts = write_trace(path, accesses_of(size), shape)
        meta.write_text(json.dumps(counts))
    return (path, *json.loads(meta.read_text()))


def commands(trace, out, gpu, cpu):
    """Each measured command's arguments (its outputs in ``out``)."""
    workload = ["--workload", "mooncake", "--trace", trace]
    plan = ["--model-config", MODEL_CONFIG, "--gpu-tokens", gpu]
    table = [
        "policies",
        "table",
        *workload,
        "--gpu-tokens",
        gpu,
        "--cpu-tokens",
        cpu,
        "--block-tokens",
        BLOCK,
        "--out",
        out / "table.csv",
    ]
    budgets = [
        "ttft",
        "budgets",
        "--model",
        TTFT_MODEL,
        *workload,
        *plan,
        "--cpu-gib-grid",
        "4,100000",
        "--out",
        out / "budgets.csv",
    ]
    return {
        "replay": ["replay", *workload, "--gpu-tokens", gpu, "--cpu-tokens", cpu],
        "replay --per-request": [
            "replay",
            *workload,
            "--gpu-tokens",
            gpu,
            "--cpu-tokens",
            cpu,
            "--per-request",
            out / "rows.csv",
        ],
        "mrc": ["mrc", *workload],
        "mrc --curve": ["mrc", *workload, "--curve", out / "curve.csv"],
        "mrc --gpu-tokens": ["mrc", *workload, "--gpu-tokens", gpu],
        "plan": ["plan", *workload, *plan, "--cpu-gib", "8"],
        "policies table": [*table, "--write-policies", "write-through", "--evictions", "lru"],
        "policies table --all": [
            *table,
            "--write-policies",
            ",".join(WRITE_POLICIES),
            "--evictions",
            ",".join(EVICTION_POLICIES),
        ],
        "ttft budgets": budgets,
        "ttft budgets write-back": [*budgets, "--write-policy", "write-back"],
    }


def measure(arguments, folder):
    """``{code, peak, projected}`` of one command run in a fresh process (``CHILD``)."""
    result = folder / "result.json"
    argv = [sys.executable, "-c", CHILD, result, *arguments]
    done = subprocess.run(list(map(str, argv)), cwd=ROOT, capture_output=True, text=True, check=False)
    if not result.is_file():
        sys.exit(f"{' '.join(map(str, arguments))} died:\n{done.stderr[-2000:]}")
    found = json.loads(result.read_text())
    result.unlink()
    if found["code"]:
        found["error"] = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {found['code']}"
    return found


def declared(name, trace):
    """The footprint the command ``name`` declares in this tree (for the fit's table)."""
    from kvlab.cli.policies import TABLE_FOOTPRINT
    from kvlab.cli.replay import footprint
    from kvlab.cli.ttft import budgets_footprint
    from kvlab.curves.mrc import FOOTPRINT as MRC_FOOTPRINT

    class Compiled:
        columns = True

    if name.startswith("replay"):
        return footprint(Compiled(), name.endswith("--per-request"))
    if name.startswith(("mrc", "plan")):
        return MRC_FOOTPRINT
    if name.startswith("policies"):
        return TABLE_FOOTPRINT
    policy = "write-back" if name.endswith("write-back") else "write-through"
    return budgets_footprint(MooncakeWorkload(trace=str(trace)), policy, {})


def proposed(name):
    """What the command would declare with the figures this bench supports, where its declaration is in a file
    that tracker issue 22 item 11 left to others (kvlab/cli/replay.py, kvlab/curves/mrc.py); else None."""
    if name == "replay":
        return FOOTPRINT
    if name == "replay --per-request":
        return Footprint(request=ROW_BYTES, key=FOOTPRINT.key, fixed=FOOTPRINT.fixed + PANDAS_BYTES)
    if name == "mrc --curve":
        return Footprint(MRC.access, MRC.request, MRC.key, MRC.fixed + PANDAS_BYTES)
    if name.startswith(("mrc", "plan")):
        return MRC
    return None


def mib(amount):
    return f"{amount / 2**20:.1f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1m,4m", help="comma-separated accesses per trace (default 1m,4m)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated trace shapes")
    parser.add_argument("--commands", help="comma-separated commands as the table names them (default: all)")
    parser.add_argument("--out", default="/tmp/kvlab-memory", help="the folder of the traces and outputs")
    args = parser.parse_args(argv)
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    outputs = folder / "outputs"
    outputs.mkdir(exist_ok=True)
    tiny = folder / "tiny.jsonl"
    write_trace(tiny, TINY, "conv")
    gpu, cpu = 200 * BLOCK, 10**12  # a GPU of 200 blocks; a CPU that keeps every block (what a tier holds at most)
    names = list(commands(tiny, outputs, gpu, cpu))
    chosen = names if not args.commands else [name.strip() for name in args.commands.split(",")]
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        sys.exit(f"unknown command(s): {', '.join(unknown)} (known: {', '.join(names)})")
    start = {name: measure(commands(tiny, outputs, gpu, cpu)[name], folder)["peak"] for name in chosen}
    base = start.get("replay") or measure(commands(tiny, outputs, gpu, cpu)["replay"], folder)["peak"]
    print(
        "| command | trace | requests | accesses | distinct blocks | peak above start-up MiB | projected MiB | ratio |"
        " proposed MiB | ratio |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    rows = []
    for shape in args.shapes.split(","):
        for size in args.sizes.split(","):
            trace, requests, accesses, keys = ensure_trace(folder, size, shape)
            for name in chosen:
                found = measure(commands(trace, outputs, gpu, cpu)[name], folder)
                above = found["peak"] - base
                cells = [name, f"{shape}-{size}", f"{requests:,}", f"{accesses:,}", f"{keys:,}", mib(above)]
                for projection in (found["projected"], project(proposed(name), accesses, requests, keys)):
                    cells += ["-", "-"] if projection is None else [mib(projection), f"{projection / above:.2f}"]
                if "error" in found:
                    cells[6] = found["error"]
                print(f"| {' | '.join(cells)} |", flush=True)
                rows.append((name, accesses, requests, keys, above, trace))
    print(
        f"\nStart-up: kvlab replay's peak on a tiny trace ({TINY} accesses), {mib(base)} MiB; what a command imports"
        " besides (pandas, for a CSV) counts as held. Each command's own peak there: "
        + ", ".join(f"{name} {mib(peak)} MiB" for name, peak in start.items())
        + "."
    )
    fit(rows)


def project(footprint, accesses, requests, keys):
    """The meter's projection of the whole input with ``footprint`` (None: none)."""
    return None if footprint is None else Meter(0, footprint).project(accesses, requests, keys)


def fit(rows):
    """Least squares of each command's peaks above start-up to a constant and bytes per access, request and key
    (the mean, where the footprints are the most), beside the footprint it declares."""
    print(
        "\n| fit of the peaks | fixed MiB | /access | /request | /key | declared: fixed MiB, /access, /request, /key |"
        "\n|---|---:|---:|---:|---:|---|"
    )
    for name in dict.fromkeys(row[0] for row in rows):
        mine = [row for row in rows if row[0] == name]
        have = declared(name, mine[0][5])
        shown = f"{mib(have.fixed)}, {have.access}, {have.request}, {have.key}"
        if len({(row[1], row[2], row[3]) for row in mine}) < 4:
            print(f"| {name} | - | - | - | - | {shown} |")
            continue
        design = np.array([[1, *row[1:4]] for row in mine], dtype=float)
        solution, *_ = np.linalg.lstsq(design, np.array([row[4] for row in mine], dtype=float), rcond=None)
        fixed, access, request, key = solution
        print(f"| {name} | {mib(fixed)} | {access:.1f} | {request:.1f} | {key:.1f} | {shown} |")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
