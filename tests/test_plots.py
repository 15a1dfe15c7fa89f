"""The figures of results/plots/ (kvlab/report/plots.py) and the pipeline's ``ttft`` and ``plots`` sections.

Each figure, drawn by the command from the inputs that kvlab/workflow/paths.py gives it, is byte for byte the
committed PNG, in any process; it changes when any of its inputs does; bad input is one line on stderr
and leaves the output alone. What a figure says is read from its artists: a figure of the synthetic example
says so, coinciding series are drawn apart and named so, the budgets are the p50 the captions quote, the real
server's RAM cache is called so, and the real trace has its figure. The pipeline lists a plot only when its
inputs are configured, and the schema and the cross-field checks reject the ``ttft`` and ``plots`` values that
cannot be drawn.
"""

import csv
import io
import json
import os
import shlex
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, SCHEMA, both, deleter, kvlab, load_config, run_python, setter
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from kvlab.cli import plots as plots_cli
from kvlab.report import plots
from kvlab.workflow import checks, commands, paths

PLOT_INPUTS = paths.plot_inputs(load_config())  # {plot: its input artifacts, in the order `kvlab plots` takes them}
PLOT_ARGS = {
    name: shlex.split(commands.job_args(load_config(), "plot", plot=name)) for name in PLOT_INPUTS
}  # flags, as the rule
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The real trace's figure, from the committed replay table and curves, as kvlab/workflow/paths.py lists them.
TRACE_INPUTS = PLOT_INPUTS["trace_reuse"]
TRACE_NOTE = "Token hit ratios of the Mooncake FAST'25 conversation trace (data/traces/mooncake/), LRU tiers"


def committed_png(name):
    return (ROOT / paths.plot_path(name)).read_bytes()


def tracked_files():
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return set(listing.decode().split("\0")) - {""}


# --- The committed figures, redrawn ---------------------------------------------------------------------


DRAW_ALL = """
import json, sys
from kvlab.cli import main
for argv in json.loads(sys.argv[1]):
    if main(argv):
        sys.exit(f"kvlab {' '.join(argv)} failed")
"""


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """``{(plot, seed): PNG bytes}``: every plot drawn by the command as the rules run it (one after another in one
    process, from the repository root, with the pipeline's inputs), twice, in two processes with different hash
    seeds."""
    folder = tmp_path_factory.mktemp("drawn")
    processes = {}
    for seed in ("0", "4242"):
        jobs = [
            ["plots", name, *PLOT_ARGS[name], "--out", str(folder / f"{name}-{seed}.png"), *inputs]
            for name, inputs in PLOT_INPUTS.items()
        ]
        env = {**os.environ, "PYTHONHASHSEED": seed}
        command = [sys.executable, "-c", DRAW_ALL, json.dumps(jobs)]
        processes[seed] = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for seed, process in processes.items():
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, (seed, stderr.decode())
    return {(name, seed): (folder / f"{name}-{seed}.png").read_bytes() for name in PLOT_INPUTS for seed in processes}


def test_the_command_offers_every_plot_in_order():
    """`kvlab plots`'s choices are the plots kvlab/report/plots.py draws (the command does not import it to parse)."""
    assert plots_cli.NAMES == tuple(plots.PLOTS)


def test_every_plot_is_configured_and_committed():
    committed = sorted(path.stem for path in (ROOT / "results" / "plots").glob("*.png"))
    assert sorted(PLOT_INPUTS) == sorted(plots.PLOTS) == committed
    assert len(committed) == 13


@pytest.mark.parametrize("name", sorted(PLOT_INPUTS))
def test_the_command_draws_the_committed_png(drawn, name):
    assert drawn[name, "0"] == committed_png(name), f"{name}: regenerate with `make run` and commit"


@pytest.mark.parametrize("name", sorted(PLOT_INPUTS))
def test_two_processes_draw_the_same_bytes(drawn, name):
    assert drawn[name, "0"] == drawn[name, "4242"]


def png_chunks(data):
    """``[(type, data)]`` of a PNG file, each chunk's length and CRC checked."""
    assert data[:8] == PNG_SIGNATURE
    chunks, offset = [], 8
    while offset < len(data):
        assert offset + 12 <= len(data), "truncated chunk"
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind, body = data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert len(body) == length and zlib.crc32(kind + body) == crc, kind
        chunks.append((kind.decode("ascii"), body))
        offset += 12 + length
    assert offset == len(data)
    return chunks


TEXT_CHUNKS = ("tEXt", "zTXt", "iTXt")


def check_png(data):
    """A whole image of plausible size whose metadata has no software tag, date or path."""
    chunks = png_chunks(data)
    kinds = [kind for kind, _ in chunks]
    assert kinds[0] == "IHDR" and kinds[-1] == "IEND" and chunks[-1][1] == b""
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert 400 <= width <= 1500 and 300 <= height <= 1000, (width, height)
    assert (depth, colour, interlace) == (8, 6, 0)  # 8-bit RGBA, not interlaced
    pixels = zlib.decompress(b"".join(body for kind, body in chunks if kind == "IDAT"))
    assert len(pixels) == height * (1 + 4 * width)  # every scanline: a filter byte and the RGBA pixels
    assert all(pixels[row * (1 + 4 * width)] <= 4 for row in range(height))
    assert "tIME" not in kinds
    keywords = [body.split(b"\0", 1)[0].decode("latin-1") for kind, body in chunks if kind in TEXT_CHUNKS]
    assert not {"Software", "Creation Time", "Date", "date:create", "date:modify"} & set(keywords), keywords
    texts = b"".join(body for kind, body in chunks if kind in TEXT_CHUNKS)
    assert str(ROOT).encode() not in texts and os.path.expanduser("~").encode() + b"/" not in texts


@pytest.mark.parametrize("name", sorted(PLOT_INPUTS))
def test_png_is_whole_and_carries_no_software_or_date(drawn, name):
    check_png(committed_png(name))
    check_png(drawn[name, "4242"])


def test_the_png_check_catches_a_software_tag_and_a_date():
    """check_png has teeth: matplotlib's own default PNG (with the Software tag) and a tIME chunk fail it."""
    figure = plots.plt.figure(figsize=(7.5, 5.0))
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=plots.DPI)
    plots.plt.close(figure)
    with pytest.raises(AssertionError, match="Software"):
        check_png(buffer.getvalue())
    clean = plots.png(plots.plt.figure(figsize=(7.5, 5.0)))
    check_png(clean)
    body = struct.pack(">HBBBBB", 2026, 1, 1, 0, 0, 0)
    stamped = clean[:-12] + struct.pack(">I", len(body)) + b"tIME" + body
    stamped += struct.pack(">I", zlib.crc32(b"tIME" + body)) + clean[-12:]
    with pytest.raises(AssertionError):
        check_png(stamped)


# --- Plots follow their data ------------------------------------------------------------------------------

# The column each plot draws from its CSV or JSONL inputs (a JSON input has its first value changed).
DRAWN_COLUMN = {
    "gpu_cliff": "predicted_p50_ms",
    "cpu_cliff": "predicted_p50_ms",
    "mrc": "token_hit_ratio",
    "ttft_per_pass": "ttft_ms",
    "predicted_vs_measured": "predicted_p50_ms",
    "ttft_budgets": "predicted_p50_ms",
    "real_ttft_per_pass": "ttft_ms",
    "real_predicted_vs_measured": "predicted_p50_ms",
    "trace_reuse": "token_hit_ratio",
    "ttft_hardware_lab": "ttft_ms",
    "ttft_hardware_budgets": "predicted_p50_ms",
    "simulate_ttft_budgets": "ttft_ms",
    "simulate_ttft_load": "ttft_ms",
}
# A JSON input whose first value its plot does not draw: the keys of one it does (kvlab ttft predict's first pass,
# kvlab simulate's TTFT p99).
DRAWN_KEYS = {
    "ttft_hardware_lab": ("rounds", 0, "p50_ms"),
    "simulate_ttft_budgets": ("ttft_ms", "p99"),
    "simulate_ttft_load": ("ttft_ms", "p99"),
}


def change_data(path, column, keys=None):
    """Rewrite the artifact at ``path`` with different data: the first value of a JSON document (or the one at
    ``keys``, where it has them) raised by 7, ``column`` of every CSV row or JSONL record halved."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        document = node = json.loads(text)
        if keys and keys[0] in document:
            for key in keys[:-1]:
                node = node[key]
            node[keys[-1]] += 7
        else:
            while isinstance(node[next(iter(node))], dict):
                node = node[next(iter(node))]
            node[next(iter(node))] += 7
        changed = json.dumps(document, indent=2) + "\n"
    elif path.suffix == ".jsonl":
        records = [json.loads(line) for line in text.splitlines()]
        changed = "".join(json.dumps({**record, column: record[column] / 2}) + "\n" for record in records)
    else:
        rows = list(csv.DictReader(io.StringIO(text)))
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({**row, column: float(row[column]) / 2} for row in rows)
        changed = buffer.getvalue()
    assert changed != text
    path.write_text(changed, encoding="utf-8")


def draw(name, inputs, out):
    """`kvlab plots` in this process, with the pipeline's flags; the PNG it wrote."""
    done = kvlab("plots", name, *PLOT_ARGS[name], "--out", out, *inputs)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), done.stderr
    return Path(out).read_bytes()


CHANGES = [(name, index) for name, inputs in PLOT_INPUTS.items() for index in range(len(inputs))]
COPIES_DRAWN = set()  # the plots whose copied inputs were seen to draw the committed figure


@pytest.mark.parametrize(
    ("name", "index"), CHANGES, ids=[f"{name}-{Path(PLOT_INPUTS[name][index]).name}" for name, index in CHANGES]
)
def test_a_plot_changes_with_each_of_its_inputs(tmp_path, name, index):
    inputs = [tmp_path / source for source in PLOT_INPUTS[name]]  # same relative paths: the curves' legends
    for source, copy in zip(PLOT_INPUTS[name], inputs, strict=True):
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes((ROOT / source).read_bytes())
    if name not in COPIES_DRAWN:  # copies of the inputs, elsewhere, draw the committed figure (once a plot)
        assert draw(name, inputs, tmp_path / "same.png") == committed_png(name)
        COPIES_DRAWN.add(name)
    change_data(inputs[index], DRAWN_COLUMN[name], DRAWN_KEYS.get(name))
    assert draw(name, inputs, tmp_path / "changed.png") != committed_png(name)


# --- Bad input: one line, no output -------------------------------------------------------------------------

GOOD = object()  # stands for the committed input at that position

# plot, inputs (GOOD, or the text of a bad file), exit status, a part of the error line
BAD_INPUTS = {
    "unknown plot": ("heatmap", [GOOD], 2, "invalid choice: 'heatmap'"),
    "no input": ("gpu_cliff", [], 2, "inputs"),
    "missing input": ("gpu_cliff", [None, GOOD], 1, "bad-0"),
    "one input short": ("gpu_cliff", [GOOD], 2, "gpu_cliff reads 2 input(s) (CLIFF TTFT_SWEEP), got 1"),
    "one input too many": (
        "predicted_vs_measured",
        [GOOD, GOOD],
        2,
        "predicted_vs_measured reads 1 input(s) (TABLE), got 2",
    ),
    "cliff not JSON": ("gpu_cliff", ["21520: 0\n", GOOD], 1, "bad-0"),
    "cliff a JSON list": ("gpu_cliff", ["[0, 0, 10]\n", GOOD], 1, "bad-0"),
    "cliff of rooms that are not numbers": ("gpu_cliff", ['{"big": 0}\n', GOOD], 1, "big"),
    "policy cliff without rooms": ("cpu_cliff", ['{"write-through": 10}\n', GOOD], 1, "bad-0"),
    "policy cliff of lists": ("cpu_cliff", ['{"write-through": [10, 0]}\n', GOOD], 1, "bad-0"),
    "sweep CSV without the columns": ("gpu_cliff", [GOOD, "room,ms\n1,2\n"], 1, "bad-1.csv: no column "),
    "curve CSV without the hit ratio": ("mrc", ["gpu_tokens,hits\n0,0\n"], 1, "token_hit_ratio"),
    "empty curve CSV": ("mrc", [""], 1, "bad-0"),
    "measurement without ttft_ms": ("ttft_per_pass", ['{"config": "a", "pass": "p"}\n'], 1, "ttft_ms"),
    "measurement not JSONL": ("ttft_per_pass", ["config,pass,ttft_ms\na,p,1\n"], 1, "bad-0"),
    "table without the measured column": ("predicted_vs_measured", ["config,pass\na,p\n"], 1, "measured_p50_ms"),
    "budgets without rounds": ("ttft_budgets", ["cpu_gib,predicted_mean_ms\n0,1\n"], 1, "bad-0.csv: no column "),
    "budgets of means only": (
        "ttft_budgets",
        ["cpu_gib,round,token_hit_ratio,predicted_mean_ms\n0,all,0,1\n"],
        1,
        "bad-0.csv: no column predicted_p50_ms",
    ),
    "trace without its GPU curve": (
        "trace_reuse",
        [GOOD],
        2,
        "trace_reuse reads at least 2 input(s) (TABLE GPU_CURVE [CPU_CURVES...]), got 1",
    ),
    "trace table without rooms": (
        "trace_reuse",
        ["round,token_hit_ratio\nall,0.5\n", GOOD],
        1,
        "bad-0.csv: no column ",
    ),
    "trace CPU curve of no GPU room": (
        "trace_reuse",
        [GOOD, GOOD, "cpu_tokens,token_hit_ratio\n0,0\n"],
        1,
        "bad-2.csv: not a CPU tier's curve",
    ),
    "binary input": ("ttft_budgets", [PNG_SIGNATURE.decode("latin-1") + "\0\xff"], 1, "bad-0"),
    # Strict JSON only: NaN, Infinity and numbers beyond the float range are refused, naming the file (and line).
    "cliff with NaN": ("gpu_cliff", ['{"21520": NaN}\n', GOOD], 1, "bad-0.json: malformed JSON (NaN"),
    "cliff with Infinity": ("gpu_cliff", ['{"21520": -Infinity}\n', GOOD], 1, "bad-0.json: malformed JSON (-Infinity"),
    "cliff beyond the float range": ("gpu_cliff", ['{"21520": 1e999}\n', GOOD], 1, "beyond the float range"),
    "measurement with NaN": (
        "ttft_per_pass",
        [
            '{"config": "a", "pass": "p", "doc": 0, "doc_tokens": 1, "ttft_ms": 1, "total_ms": 2}\n'
            '{"config": "a", "pass": "p", "doc": 1, "doc_tokens": 1, "ttft_ms": NaN, "total_ms": 2}\n'
        ],
        1,
        "bad-0.jsonl:2: malformed JSON (NaN",
    ),
    "hardware lab without its requests": (
        "ttft_hardware_lab",
        [GOOD, GOOD],
        2,
        "ttft_hardware_lab reads at least 3 input(s) (HANDOUT PREDICTION REQUESTS [MORE...]), got 2",
    ),
    "hardware lab of a config without its requests": (
        "ttft_hardware_lab",
        [GOOD, GOOD, GOOD, GOOD],
        1,
        "in pairs",
    ),
    "handout without latencies": ("ttft_hardware_lab", ['{"source": "x"}\n', GOOD, GOOD], 1, "latency_ms"),
    "hardware requests without TTFT": (
        "ttft_hardware_lab",
        [GOOD, GOOD, "round,input_tokens\npass1,1\n"],
        1,
        "bad-2.csv: no column ",
    ),
    "hardware budgets without p99": (
        "ttft_hardware_budgets",
        ["cpu_gib,round,token_hit_ratio,predicted_p50_ms\n0,all,0,1\n"],
        1,
        "bad-0.csv: no column predicted_p99_ms",
    ),
    "simulation not of kvlab simulate": (
        "simulate_ttft_load",
        ['{"ttft_ms": {"p99": 1}}\n'],
        1,
        "bad-0.json: expected the output of kvlab simulate",
    ),
    "simulated budget without its percentiles": (
        "simulate_ttft_budgets",
        [GOOD, GOOD, GOOD],
        1,
        "in pairs",
    ),
    "percentiles without TTFT": (
        "simulate_ttft_budgets",
        [GOOD, "percentile,queue_ms\n50,1\n"],
        1,
        "bad-1.csv: no column ttft_ms",
    ),
    "an infinite number in a CSV": (
        "predicted_vs_measured",
        ["config,pass,measured_p50_ms,predicted_p50_ms,p50_ratio\na,p,inf,1,1\n"],
        1,
        "bad-0.csv: column measured_p50_ms must hold finite numbers",
    ),
}


def one_line_error(done):
    """The command failed with exactly one line on stderr, the parser's; return the line."""
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.startswith("kvlab plots: error: ") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def bad_input_files(folder, plot, inputs):
    """The inputs of a BAD_INPUTS case: committed artifacts, and bad files written under ``folder``."""
    real = PLOT_INPUTS.get(plot) or {"trace_reuse": TRACE_INPUTS}.get(plot, PLOT_INPUTS["gpu_cliff"])
    paths = []
    for index, text in enumerate(inputs):
        committed = real[min(index, len(real) - 1)]
        if text is GOOD:
            paths.append(str(ROOT / committed))
            continue
        path = folder / f"bad-{index}{Path(committed).suffix}"
        if text is not None:  # None: a file that does not exist
            path.write_bytes(text.encode("latin-1"))
        paths.append(str(path))
    return paths


@pytest.mark.parametrize(("plot", "inputs", "status", "needle"), BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_one_line_and_leaves_the_output_alone(tmp_path, plot, inputs, status, needle):
    """In this process (`kvlab plots`, as the command runs it): the exit status, one line, the sentinel output kept."""
    paths = bad_input_files(tmp_path, plot, inputs)
    out = tmp_path / "figures" / "plot.png"
    out.parent.mkdir()
    out.write_bytes(b"sentinel")
    done = kvlab("plots", plot, "--out", out, *paths)
    line = one_line_error(done)
    assert done.returncode == status
    assert needle in line
    assert out.read_bytes() == b"sentinel"
    assert os.listdir(out.parent) == ["plot.png"]  # no temporary file left beside it


@pytest.mark.parametrize("case", ["missing input", "cliff a JSON list", "budgets without rounds"])
def test_the_command_fails_in_one_line(tmp_path, case):
    """The same, as a command: nothing else (no warning, no traceback) on stderr."""
    plot, inputs, status, needle = BAD_INPUTS[case]
    out = tmp_path / "plot.png"
    out.write_bytes(b"sentinel")
    done = run_python("-m", "kvlab", "plots", plot, "--out", out, *bad_input_files(tmp_path, plot, inputs))
    assert needle in one_line_error(done) and done.returncode == status
    assert out.read_bytes() == b"sentinel"


def test_a_failed_plot_creates_no_output(tmp_path):
    out = tmp_path / "plot.png"
    one_line_error(kvlab("plots", "gpu_cliff", "--out", out, tmp_path / "missing.json", tmp_path / "x.csv"))
    assert os.listdir(tmp_path) == []


def test_an_output_in_a_missing_folder_is_one_line(tmp_path):
    out = tmp_path / "missing" / "plot.png"
    line = one_line_error(kvlab("plots", "ttft_per_pass", "--out", out, *PLOT_INPUTS["ttft_per_pass"], cwd=ROOT))
    assert line.startswith(f"kvlab plots: error: {out}: cannot write: ")
    assert os.listdir(tmp_path) == []


def test_an_output_that_is_a_folder_is_one_line(tmp_path):
    out = tmp_path / "plot.png"
    out.mkdir()
    (out / "keep").write_text("x")
    line = one_line_error(kvlab("plots", "ttft_per_pass", "--out", out, *PLOT_INPUTS["ttft_per_pass"], cwd=ROOT))
    assert line.startswith(f"kvlab plots: error: {out}: cannot write: ")
    assert sorted(os.listdir(tmp_path)) == ["plot.png"] and os.listdir(out) == ["keep"]


@pytest.mark.parametrize("index", [0, 1])
def test_an_output_over_an_input_is_refused(tmp_path, index):
    """--out naming one of the inputs (itself, or through a link): a usage error, and the input is left alone."""
    inputs = [tmp_path / Path(source).name for source in PLOT_INPUTS["gpu_cliff"]]
    for source, copy in zip(PLOT_INPUTS["gpu_cliff"], inputs, strict=True):
        copy.write_bytes((ROOT / source).read_bytes())
    link = tmp_path / "link"
    link.symlink_to(inputs[index])
    for out in (inputs[index], link):
        done = kvlab("plots", "gpu_cliff", "--out", out, *inputs)
        assert one_line_error(done) == f"kvlab plots: error: {out} is both an input and an output\n"
        assert done.returncode == 2
    for source, copy in zip(PLOT_INPUTS["gpu_cliff"], inputs, strict=True):
        assert copy.read_bytes() == (ROOT / source).read_bytes()
    assert sorted(os.listdir(tmp_path)) == sorted([link.name, *(path.name for path in inputs)])


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_the_figure_gets_the_umasks_mode(tmp_path, umask):
    """A new figure gets the mode the umask gives; one written over an older file keeps that file's mode (as a
    shell's ``>`` does: a private file is never made readable by others)."""
    out, older = tmp_path / "new.png", tmp_path / "older.png"
    older.write_bytes(b"older")
    older.chmod(0o640)
    previous = os.umask(umask)
    try:
        for target in (out, older):
            done = kvlab("plots", "ttft_per_pass", "--out", target, *PLOT_INPUTS["ttft_per_pass"], cwd=ROOT)
            assert (done.returncode, done.stderr) == (0, "")
    finally:
        os.umask(previous)
    for target, mode in ((out, 0o666 & ~umask), (older, 0o640)):
        assert target.stat().st_mode & 0o777 == mode, oct(target.stat().st_mode)
        check_png(target.read_bytes())


# --- What the figures say, read from their artists ---------------------------------------------------------


def figure(name, inputs=None, note=None):
    """The figure of plot ``name`` (drawn as the command draws it) from ``inputs`` (the pipeline's by default)."""
    inputs = PLOT_INPUTS[name] if inputs is None else inputs
    return plots.figure_of(name, [ROOT / path for path in inputs], note)


def legend_texts(axis):
    """An axis's legend entries, each on one line (a long one is wrapped in the figure)."""
    return [" ".join(text.get_text().split()) for text in axis.get_legend().get_texts()]


def titles(drawn):
    """The figure's title and its axes' titles."""
    found = [drawn._suptitle.get_text()] if drawn._suptitle else []
    return found + [axis.get_title() for axis in drawn.axes]


def words(drawn):
    """Every text the figure's axes show (titles, labels, ticks, legends, annotations), not the note under it."""
    found = titles(drawn)
    for axis in drawn.axes:
        found += [axis.get_xlabel(), axis.get_ylabel(), *(text.get_text() for text in axis.texts)]
        found += [label.get_text() for label in axis.get_xticklabels() + axis.get_yticklabels()]
        found += legend_texts(axis) if axis.get_legend() else []
    return found


@pytest.fixture
def close_figures():
    yield
    plots.plt.close("all")


def test_the_pipeline_notes_the_synthetic_example_under_its_figures():
    """The figures of times drawn from the synthetic example are the pipeline's MEASURED_PLOTS, noted so."""
    for name in commands.MEASURED_PLOTS:
        assert PLOT_ARGS[name] == ["--note", commands.SYNTHETIC_NOTE]
    assert plots.is_synthetic(commands.SYNTHETIC_NOTE)
    assert not plots.is_synthetic(load_config()["real_measurement"]["note"]) and not plots.is_synthetic(None)


@pytest.mark.parametrize("name", commands.MEASURED_PLOTS)
def test_a_figure_of_the_synthetic_example_says_so_and_claims_no_measurement(close_figures, name):
    drawn = figure(name, note=PLOT_ARGS[name][1])
    assert any("synthetic example" in title for title in titles(drawn)), titles(drawn)
    assert not [text for text in words(drawn) if "measur" in text.lower()], words(drawn)
    assert [text.get_text() for text in drawn.texts] == [commands.SYNTHETIC_NOTE]


@pytest.mark.parametrize("name", commands.MEASURED_PLOTS)
def test_a_figure_without_the_synthetic_note_does_not_say_synthetic(close_figures, name):
    for note in (None, "TTFT measured on a lab server"):
        drawn = figure(name, note=note)
        assert not [text for text in words(drawn) if "synthetic" in text.lower()], words(drawn)


def test_the_synthetic_comparison_names_its_bars_by_their_source(close_figures):
    axis = figure("predicted_vs_measured", note=commands.SYNTHETIC_NOTE).axes[0]
    assert legend_texts(axis) == ["synthetic example p50", "predicted p50"]
    assert legend_texts(figure("predicted_vs_measured").axes[0]) == ["measured p50", "predicted p50"]


RAM_CACHE = "lmcache: the server's RAM cache (llama-cpp-python's LlamaRAMCache)"


def test_the_real_servers_requests_call_its_cache_the_ram_cache(close_figures):
    real = figure("real_ttft_per_pass", note=PLOT_ARGS["real_ttft_per_pass"][1])
    assert legend_texts(real.axes[0]) == ["baseline: no RAM cache", RAM_CACHE]
    assert "llama-cpp-python server" in real.axes[0].get_title()
    assert legend_texts(figure("ttft_per_pass").axes[0]) == ["baseline", "lmcache"]  # the lab's configs, as named


def test_the_real_servers_comparison_calls_its_cache_the_ram_cache(close_figures):
    axis = figure("real_predicted_vs_measured", note=PLOT_ARGS["real_predicted_vs_measured"][1]).axes[0]
    ticks = [label.get_text() for label in axis.get_xticklabels()]
    assert ticks[:1] == ["baseline\n(no RAM cache)\npass1-cold"]
    assert ticks[-1] == "lmcache\n(RAM cache)\npass3-reverse"  # the config's name kept, with what it is
    (words,) = [" ".join(text.get_text().split()) for text in axis.texts if "LlamaRAMCache" in text.get_text()]
    assert words == f"baseline: no RAM cache {RAM_CACHE}"
    synthetic = figure("predicted_vs_measured").axes[0]
    assert [label.get_text() for label in synthetic.get_xticklabels()][-1] == "lmcache\npass3-reverse"


def budgets_table():
    with open(ROOT / PLOT_INPUTS["ttft_budgets"][0], newline="", encoding="utf-8") as rows:
        return list(csv.DictReader(rows))


def test_the_budgets_figure_plots_the_p50_it_is_quoted_by(close_figures):
    top, bottom = figure("ttft_budgets", note=commands.SYNTHETIC_NOTE).axes
    assert "p50" in top.get_ylabel() and "mean" not in top.get_ylabel()
    rows = budgets_table()
    rounds = list(dict.fromkeys(row["round"] for row in rows))
    for axis, column in ((top, "predicted_p50_ms"), (bottom, "token_hit_ratio")):
        assert [" ".join(line.get_label().split()).split(" (")[0] for line in axis.lines] == rounds
        for line, name in zip(axis.lines, rounds, strict=True):
            mine = [row for row in rows if row["round"] == name]
            assert list(line.get_xdata()) == [float(row["cpu_gib"]) for row in mine]
            assert list(line.get_ydata()) == [float(row[column]) for row in mine]


def points(line):
    return set(zip(line.get_xdata(), line.get_ydata(), strict=True))


def series_lines(axis):
    return [line for line in axis.lines if not line.get_label().startswith("_")]  # those with a legend entry


def assert_coinciding_lines_differ(axis):
    """Lines sharing a point differ in line style, marker and width, the later one narrower (it is drawn over); the
    marks of a cliff's edge aside."""
    lines = series_lines(axis)
    shared = [(a, b) for i, a in enumerate(lines) for b in lines[i + 1 :] if points(a) & points(b)]
    assert shared  # the data have coinciding series: the check has something to check
    for under, over in shared:
        assert under.get_linestyle() != over.get_linestyle() and under.get_marker() != over.get_marker()
        assert under.get_linewidth() > over.get_linewidth() and under.get_zorder() < over.get_zorder()


def expected_legend(lines, number, unit):
    """The legend a figure of these lines should have, written from their data here (an independent reading of the
    rule: each line names every later line it lies on, over each run of its consecutive points, or "throughout")."""
    data = [(line.get_label().split("\n")[0], list(line.get_xdata()), list(line.get_ydata())) for line in lines]
    legend = []
    for index, (name, xs, ys) in enumerate(data):
        words = []
        for other, their_x, their_y in data[index + 1 :]:
            theirs = dict(zip(their_x, their_y, strict=True))
            equal = [x in theirs and theirs[x] == y for x, y in zip(xs, ys, strict=True)]
            if all(equal) and len(theirs) == len(xs):
                words = [f"same as {other} throughout"]
                break
            runs, start = [], None
            for at, flag in enumerate([*equal, False]):
                if flag and start is None:
                    start = at
                elif not flag and start is not None:
                    first, last = xs[start], xs[at - 1]
                    runs.append(number(first) if first == last else f"{number(first)}\u2013{number(last)}")
                    start = None
            if runs:
                words.append(f"{other} at {' and '.join(runs)} {unit}")
        if len(words) == 1 and words[0].endswith("throughout"):
            legend.append(f"{name} ({words[0]})")
        else:
            legend.append(f"{name} (same as {', as '.join(words)})" if words else name)
    return legend


def test_the_cpu_cliffs_policies_that_coincide_are_drawn_apart_and_say_so(close_figures):
    top, bottom = figure("cpu_cliff", note=commands.SYNTHETIC_NOTE).axes
    assert_coinciding_lines_differ(top)
    assert legend_texts(top) == expected_legend(series_lines(top), lambda value: f"{value:,}", "tokens")
    assert any("same as" in text for text in legend_texts(top))  # the data have policies that coincide
    cliff = json.loads((ROOT / PLOT_INPUTS["cpu_cliff"][0]).read_text(encoding="utf-8"))
    for line, (policy, misses) in zip(series_lines(top), cliff.items(), strict=True):
        assert line.get_label().startswith(policy)
        assert list(line.get_ydata()) == list(misses.values())  # not offset: the values themselves


def test_the_budgets_rounds_that_coincide_are_drawn_apart_and_say_so(close_figures):
    top, bottom = figure("ttft_budgets", note=commands.SYNTHETIC_NOTE).axes
    for axis in (top, bottom):
        assert_coinciding_lines_differ(axis)
        assert legend_texts(axis) == expected_legend(series_lines(axis), lambda value: f"{value:g}", "GiB")
        assert any("same as" in text for text in legend_texts(axis))


def test_the_hardware_lab_is_drawn_beside_the_configs_handout_latencies(close_figures):
    """The lab priced from the hardware: each pass's priced p50 (kvlab ttft predict's), beside the per-tier latencies
    config.yaml's example_measurement.latency_ms holds (results/ttft/hardware/handout.json, written from the
    config), and per tier the handout's beside the priced one; priced, not measured, and not the synthetic example."""
    config = load_config()
    handout = json.loads((ROOT / paths.TTFT_HANDOUT).read_text(encoding="utf-8"))
    assert handout == commands.handout_latencies(config)
    drawn = figure("ttft_hardware_lab", note=PLOT_ARGS["ttft_hardware_lab"][1])
    top, bottom = drawn.axes
    latency = config["example_measurement"]["latency_ms"]
    for tier, said in plots.HANDOUT_TIERS.items():
        assert f"handout's {said}: {latency[tier]:,.1f} ms" in [text.get_text() for text in top.texts]
    for index, name in enumerate(config["ttft"]["hardware"]["lab"]["configs"]):
        prediction = json.loads((ROOT / paths.hardware_lab_path(name)).read_text(encoding="utf-8"))
        assert [bar.get_height() for bar in top.containers[index]] == [
            entry["p50_ms"] for entry in prediction["rounds"]
        ]
    assert [label.get_text() for label in bottom.get_xticklabels()] == list(plots.HANDOUT_TIERS.values())
    heights = {container[0].get_height() for container in bottom.containers}
    assert {latency[tier] for tier in plots.HANDOUT_TIERS} <= heights  # the handout's bar of each tier
    assert not [text for text in words(drawn) if "synthetic" in text.lower()]
    assert "Priced from the hardware" in PLOT_ARGS["ttft_hardware_lab"][1] and not plots.is_synthetic(
        PLOT_ARGS["ttft_hardware_lab"][1]
    )


def test_the_hardware_budgets_figure_draws_the_p50_and_p99_of_its_table(close_figures):
    (path,) = PLOT_INPUTS["ttft_hardware_budgets"]
    rows = [row for row in csv.DictReader(io.StringIO((ROOT / path).read_text(encoding="utf-8")))]
    whole = [row for row in rows if row["round"] == "all"]
    drawn = figure("ttft_hardware_budgets", note=PLOT_ARGS["ttft_hardware_budgets"][1])
    top, bottom = drawn.axes
    lines = {" ".join(line.get_label().split()).split(" (")[0]: line for line in top.lines}
    assert list(lines) == ["all requests: p99", "all requests: p50"]  # one round besides all: drawn once
    for column, label in (("predicted_p99_ms", "all requests: p99"), ("predicted_p50_ms", "all requests: p50")):
        assert list(lines[label].get_xdata()) == [float(row["cpu_gib"]) for row in whole]
        assert list(lines[label].get_ydata()) == [float(row[column]) for row in whole]
    assert list(bottom.lines[0].get_ydata()) == [float(row["token_hit_ratio"]) for row in whole]
    assert not [text for text in words(drawn) if "synthetic" in text.lower()]


def test_the_budgets_under_load_draw_each_tiers_percentiles(close_figures):
    """The TTFT distribution per CPU tier at one load: each tier's line is its --percentiles CSV (whole, then its tail
    from p90), and its legend quotes the simulation's p50 and p99 and names the tier (none, or its blocks and GiB)."""
    inputs = PLOT_INPUTS["simulate_ttft_budgets"]
    drawn = figure("simulate_ttft_budgets", note=PLOT_ARGS["simulate_ttft_budgets"][1])
    top, bottom = drawn.axes
    assert top.get_xscale() == "log"
    legend = legend_texts(top)
    for index, (document, table) in enumerate(zip(inputs[0::2], inputs[1::2], strict=True)):
        simulated = json.loads((ROOT / document).read_text(encoding="utf-8"))
        rows = read_table(table)
        assert list(top.lines[index].get_xdata()) == [float(row["ttft_ms"]) for row in rows]
        assert list(top.lines[index].get_ydata()) == [float(row["percentile"]) for row in rows]
        tail = [row for row in rows if float(row["percentile"]) >= 90]
        assert list(bottom.lines[index].get_xdata()) == [float(row["ttft_ms"]) for row in tail]
        cpu = simulated["cache"]["cpu_blocks"]
        tier = "no CPU tier" if cpu == 0 else f"CPU tier {cpu:,} blocks"
        ttft = simulated["ttft_ms"]
        assert (
            legend[index].startswith(tier) and f"p50 {ttft['p50']:,.0f} ms, p99 {ttft['p99']:,.0f} ms" in legend[index]
        )
    assert "Simulated under load" in PLOT_ARGS["simulate_ttft_budgets"][1]
    assert not [text for text in words(drawn) if "synthetic" in text.lower()]


def test_the_load_figure_draws_each_tiers_p99_against_the_load(close_figures):
    """TTFT against the load: per CPU tier of ttft.hardware.simulate.load, its p99 and p50 at each speedup (the
    simulations' own), and its preemptions; each load's tick says its requests per second."""
    config = load_config()
    load = config["ttft"]["hardware"]["simulate"]["load"]
    drawn = figure("simulate_ttft_load", note=PLOT_ARGS["simulate_ttft_load"][1])
    top, bottom = drawn.axes
    lines = {" ".join(line.get_label().split()).split(" (same")[0]: line for line in series_lines(top)}
    documents = [json.loads((ROOT / path).read_text(encoding="utf-8")) for path in PLOT_INPUTS["simulate_ttft_load"]]
    for index, cpu in enumerate(load["cpu_blocks"]):
        mine = documents[index * len(load["speedup"]) : (index + 1) * len(load["speedup"])]
        tier = "no CPU tier" if cpu == 0 else f"CPU tier {cpu:,} blocks"
        (p99,) = [line for name, line in lines.items() if name.startswith(tier) and name.endswith(": p99")]
        assert list(p99.get_xdata()) == load["speedup"]
        assert list(p99.get_ydata()) == [document["ttft_ms"]["p99"] for document in mine]
        (p50,) = [line for name, line in lines.items() if name.startswith(tier) and name.endswith(": p50")]
        assert list(p50.get_ydata()) == [document["ttft_ms"]["p50"] for document in mine]
        assert list(series_lines(bottom)[index].get_ydata()) == [document["preemptions"] for document in mine]
    ticks = [label.get_text() for label in bottom.get_xticklabels()]
    assert ticks == [
        f"x{speedup:g}\n{documents[k]['requests_per_s']:,.2f} req/s" for k, speedup in enumerate(load["speedup"])
    ]
    assert not [text for text in words(drawn) if "synthetic" in text.lower()]


def test_the_simulations_percentiles_hold_the_jsons_percentiles():
    """Each simulated point's --percentiles CSV quotes the p50, p90 and p99 of its JSON, for every time, and rises."""
    config = load_config()
    workload = config["ttft"]["hardware"]["simulate"]["workload"]
    for point in paths.simulate_points(config):
        simulated = json.loads((ROOT / paths.simulate_path(workload, *point)).read_text(encoding="utf-8"))
        rows = {row["percentile"]: row for row in read_table(paths.simulate_path(workload, *point, "csv"))}
        assert list(rows)[0] == "0" and list(rows)[-1] == "100" and len(rows) == 103
        for time in ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms"):
            for percentile in ("50", "90", "99"):
                assert float(rows[percentile][time]) == simulated[time][f"p{percentile}"], (point, time)
            values = [float(row[time]) for row in rows.values()]
            assert values == sorted(values)


def test_coinciding_names_every_run_and_a_series_the_same_throughout():
    series = {"a": ([1, 2, 3, 4], [0, 0, 5, 0]), "b": ([1, 2, 3, 4], [0, 0, 6, 0]), "c": ([1, 2, 3, 4], [9, 9, 9, 9])}
    shown = plots.spans_of(str, "GiB")
    assert plots.coinciding(series, 0, shown) == "same as b at 1\u20132 and 4 GiB"
    assert plots.coinciding(series, 2, shown) == ""
    same = {"a": ([1, 2], [3, 4]), "b": ([1, 2], [3, 4]), "c": ([1, 2], [3, 5])}
    assert plots.coinciding(same, 0, shown) == "same as b throughout"
    assert plots.coinciding(same, 1, shown) == "same as c at 1 GiB"
    assert plots.runs([(1, True), (2, False), (3, True), (4, True)]) == [(1, 1), (3, 4)]


def read_table(path):
    with open(ROOT / path, newline="", encoding="utf-8") as rows:
        return list(csv.DictReader(rows))


def test_the_trace_figure_draws_the_curves_and_the_replays_on_them(close_figures):
    drawn = figure("trace_reuse", TRACE_INPUTS, TRACE_NOTE)
    left, right = drawn.axes
    assert "conversation trace" in drawn._suptitle.get_text()
    assert left.get_xscale() == right.get_xscale() == "log"
    replays = [row for row in read_table(TRACE_INPUTS[0]) if row["round"] == "all"]
    curve = [row for row in read_table(TRACE_INPUTS[1]) if int(row["gpu_tokens"]) > 0]  # log scale: no room 0
    (gpu_line,) = [line for line in left.lines if line.get_label() == "GPU tier, exact LRU"]
    assert list(gpu_line.get_xdata()) == [int(row["gpu_tokens"]) for row in curve]
    assert list(gpu_line.get_ydata()) == [float(row["token_hit_ratio"]) for row in curve]
    (alone,) = [line for line in left.lines if line.get_label() == "replays, no CPU tier"]
    assert points(alone) == {
        (int(row["gpu_tokens"]), float(row["token_hit_ratio"])) for row in replays if row["cpu_tokens"] == "0"
    }
    ceiling = max(float(row["token_hit_ratio"]) for row in curve)
    assert f"ceiling, all the reuse it holds: {ceiling:.3f}" in legend_texts(left)
    assert legend_texts(right) == [
        f"ceiling, all the reuse it holds: {ceiling:.3f}",
        "CPU tier at GPU room 1M",
        "replays at GPU room 1M",
        "CPU tier at GPU room 10M",
        "replays at GPU room 10M",
    ]
    cpu_lines = [line for line in right.lines if line.get_label().startswith("CPU tier")]
    replay_lines = [line for line in right.lines if line.get_label().startswith("replays")]
    assert len({line.get_linestyle() for line in cpu_lines}) == len(cpu_lines) == 2  # the curves cross and meet
    assert len({line.get_marker() for line in replay_lines}) == len(replay_lines) == 2  # 0.369 and 0.369 at 40M
    for room, line in zip((1000000, 10000000), replay_lines, strict=True):
        expected = {
            (int(row["cpu_tokens"]), float(row["token_hit_ratio"]))
            for row in replays
            if int(row["gpu_tokens"]) == room and row["cpu_tokens"] != "0"
        }
        assert points(line) == expected and len(expected) == 2


def test_the_trace_figures_replays_lie_on_its_curves():
    """What the figure shows as a check holds: every replay's hit ratio is its curve's at that room."""
    replays = [row for row in read_table(TRACE_INPUTS[0]) if row["round"] == "all"]
    curves = {None: read_table(TRACE_INPUTS[1])}
    curves.update({gpu: read_table(f"results/mrc/conversation/block512-cpu-at-gpu{gpu}.csv") for gpu in (10**6, 10**7)})
    for row in replays:
        gpu, cpu = int(row["gpu_tokens"]), int(row["cpu_tokens"])
        curve, room, at = (curves[None], "gpu_tokens", gpu) if cpu == 0 else (curves[gpu], "cpu_tokens", cpu)
        value = [float(point["token_hit_ratio"]) for point in curve if int(point[room]) <= at][-1]
        assert value == pytest.approx(float(row["token_hit_ratio"]), abs=1e-5), row


def test_the_trace_figure_is_the_same_in_two_processes(tmp_path):
    outs = []
    for seed in ("0", "4242"):
        out = tmp_path / f"trace-{seed}.png"
        command = [sys.executable, "-m", "kvlab", "plots", "trace_reuse", "--note", TRACE_NOTE, "--out", str(out)]
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([*command, *TRACE_INPUTS], cwd=ROOT, env=env, capture_output=True, text=True)
        assert (done.returncode, done.stderr) == (0, "")
        check_png(out.read_bytes())
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


# --- The pipeline: plot_inputs, ttft_targets, all_targets ---------------------------------------------------


@pytest.fixture
def unaliased():
    """The committed config without its YAML aliases shared (a change to ttft.setting stays there)."""
    return json.loads(json.dumps(load_config()))


def test_plot_inputs_are_targets_and_committed_artifacts(config):
    targets, tracked = paths.all_targets(config), tracked_files()
    for name, inputs in paths.plot_inputs(config).items():
        assert paths.plot_path(name) in targets and paths.plot_path(name) in tracked
        for path in inputs:
            measured = path == config.get("real_measurement", {}).get("source")  # a committed input, not built
            assert path in targets or measured, (name, path)  # the pipeline builds it before the plot
            assert path in tracked, (name, path)  # and it is committed: every figure is drawn from committed artifacts


def test_plot_inputs_of_the_committed_config(config):
    simulated = config["ttft"]["hardware"]["simulate"]
    assert paths.plot_inputs(config) == {
        "gpu_cliff": ["results/cliff.json", "results/ttft/sweep-cliff.csv"],
        "cpu_cliff": ["results/policies/cpu_cliff.json", "results/ttft/sweep-cpu_cliff.csv"],
        "ttft_per_pass": ["results/ttft.jsonl"],
        "predicted_vs_measured": ["results/ttft/predicted_vs_measured.csv"],
        "mrc": [
            "results/mrc/lab/block256-gpu.csv",
            "results/mrc/lab/block256-cpu-at-gpu21520.csv",
            "results/mrc/long_doc_qa/block256-gpu.csv",
            "results/mrc/long_doc_qa/block256-cpu-at-gpu21520.csv",
        ],
        "ttft_budgets": ["results/ttft/budgets-lab.csv"],
        "ttft_hardware_lab": [
            "results/ttft/hardware/handout.json",
            "results/ttft/hardware/lab-baseline.json",
            "results/ttft/hardware/lab-baseline-requests.csv",
            "results/ttft/hardware/lab-lmcache.json",
            "results/ttft/hardware/lab-lmcache-requests.csv",
        ],
        "ttft_hardware_budgets": ["results/ttft/hardware/budgets-conversation.csv"],
        "simulate_ttft_budgets": [
            f"results/ttft/hardware/simulate-{simulated['workload']}/cpu{cpu}-speedup{simulated['budgets']['speedup']}"
            + suffix
            for cpu in simulated["budgets"]["cpu_blocks"]
            for suffix in (".json", "-percentiles.csv")
        ],
        "simulate_ttft_load": [
            f"results/ttft/hardware/simulate-{simulated['workload']}/cpu{cpu}-speedup{speedup}.json"
            for cpu in simulated["load"]["cpu_blocks"]
            for speedup in simulated["load"]["speedup"]
        ],
        "real_ttft_per_pass": ["data/measurements/llama-cpp-tiny.jsonl"],
        "real_predicted_vs_measured": ["results/real/predicted_vs_measured.csv"],
        "trace_reuse": TRACE_INPUTS,
    }


def test_the_trace_figure_is_noted_with_its_trace_not_the_synthetic_example():
    (flag, note) = PLOT_ARGS["trace_reuse"]
    assert flag == "--note" and load_config()["replay"]["workloads"]["conversation"]["trace"] in note
    assert not plots.is_synthetic(note)


def test_ttft_targets_and_all_targets(config):
    ttft = ["results/ttft/model.json", "results/ttft/predicted_vs_measured.csv"]
    ttft += ["results/ttft/sweep-cliff.csv", "results/ttft/sweep-cpu_cliff.csv", "results/ttft/budgets-lab.csv"]
    assert paths.ttft_targets(config) == ttft
    targets = paths.all_targets(config)
    figures = [f"results/plots/{name}.png" for name in plots.PLOTS]
    assert set(ttft + figures) <= set(targets)
    assert len(targets) == len(set(targets))
    assert {path for path in tracked_files() if path.startswith(("results/ttft/", "results/plots/"))} <= set(targets)


def test_no_curves_no_mrc_plot(config):
    config["mrc"]["workloads"] = []
    config["plots"]["mrc_block_tokens"] = 16  # not in mrc.block_tokens, and no curve to draw: fine
    validate(config, str(SCHEMA))
    checks.check_config(config)
    assert sorted(paths.plot_inputs(config)) == sorted(set(plots.PLOTS) - {"mrc", "trace_reuse"})  # no curves
    targets = paths.all_targets(config)
    assert "results/plots/mrc.png" not in targets and "results/plots/gpu_cliff.png" in targets
    assert "results/plots/trace_reuse.png" not in targets
    assert not [path for path in targets if path.startswith("results/mrc/")]


def test_no_budgets_no_budgets_plot(config):
    del config["ttft"]["budgets"]
    validate(config, str(SCHEMA))
    checks.check_config(config)
    assert sorted(paths.plot_inputs(config)) == sorted(set(plots.PLOTS) - {"ttft_budgets"})
    assert paths.ttft_targets(config) == [paths.TTFT_MODEL, paths.TTFT_TABLE] + [
        paths.ttft_sweep_path(sweep) for sweep in ("cliff", "cpu_cliff")
    ]
    targets = paths.all_targets(config)
    assert "results/plots/ttft_budgets.png" not in targets and "results/ttft/budgets-lab.csv" not in targets
    assert "results/plots/ttft_per_pass.png" in targets


GPU_SWEEP = {
    "vary": "gpu",
    "grid": [1000, 60000],
    "fixed": {"cpu": 0},
    "passes": ["fwd"],
    "record": {"pass": 1, "value": "hits"},
}


def test_plot_inputs_follow_the_plots_section(config):
    config["sweeps"]["wide"] = GPU_SWEEP
    config["ttft"]["sweeps"].append("wide")
    config["plots"].update(gpu_cliff="wide", mrc_block_tokens=5011)
    config["mrc"]["gpu_tokens"] = [30000, 21520]  # the CPU curve at the first GPU room only
    validate(config, str(SCHEMA))
    checks.check_config(config)
    inputs = paths.plot_inputs(config)
    assert inputs["gpu_cliff"] == ["results/wide.json", "results/ttft/sweep-wide.csv"]
    assert inputs["mrc"] == [
        "results/mrc/lab/block5011-gpu.csv",
        "results/mrc/lab/block5011-cpu-at-gpu30000.csv",
        "results/mrc/long_doc_qa/block5011-gpu.csv",
        "results/mrc/long_doc_qa/block5011-cpu-at-gpu30000.csv",
    ]
    targets = paths.all_targets(config)
    assert set(inputs["gpu_cliff"] + inputs["mrc"]) <= set(targets)
    config["mrc"]["gpu_tokens"] = []  # GPU curves only
    assert paths.plot_inputs(config)["mrc"] == [
        "results/mrc/lab/block5011-gpu.csv",
        "results/mrc/long_doc_qa/block5011-gpu.csv",
    ]


def test_ttft_setting_is_the_example_measurements_by_yaml_reference():
    config = load_config()
    assert config["ttft"]["setting"]["configs"] is config["example_measurement"]["configs"]
    assert config["ttft"]["setting"]["passes"] is config["example_measurement"]["passes"]
    text = (ROOT / "config.yaml").read_text(encoding="utf-8")

    root = yaml.compose(text, Loader=yaml.SafeLoader)

    def node(*path):  # the composed node at ``path``: an alias is the very node it refers to
        found = root
        for key in path:
            found = next(value for name, value in found.value if name.value == key)
        return found

    assert node("ttft", "setting", "configs") is node("example_measurement", "configs")  # written once
    # The example's CPU room, rewritten where the file writes it (whatever its layout): the setting follows.
    lmcache = config["example_measurement"]["configs"]["lmcache"]
    room, cpu = node("example_measurement", "configs", "lmcache", "cpu_tokens"), lmcache["cpu_tokens"] + 1
    changed = yaml.safe_load(text[: room.start_mark.index] + str(cpu) + text[room.end_mark.index :])
    assert changed["ttft"]["setting"]["configs"]["lmcache"] == {**lmcache, "cpu_tokens": cpu}
    validate(changed, str(SCHEMA))
    checks.check_config(changed)
    assert f"--config lmcache:{lmcache['gpu_tokens']},{cpu}" in commands.job_args(changed, "ttft_fit")
    assert f"--config lmcache:{lmcache['gpu_tokens']},{lmcache['cpu_tokens']}" in commands.job_args(config, "ttft_fit")


# --- The cross-field rules of check_ttft ----------------------------------------------------------------------


def predicted_sweep(name, vary):
    """A lab sweep ``name`` of ``vary`` added to the config and to ttft.sweeps."""
    sweep = {**GPU_SWEEP, "vary": vary, "fixed": {"gpu": 21520, "cpu": 0}}
    return both(setter(["sweeps", name], sweep), setter(["ttft", "sweeps"], ["cliff", "cpu_cliff", name]))


TTFT_RULES = {
    "predicted sweep that does not exist": (
        setter(["ttft", "sweeps"], ["cliff", "cpu_cliff", "cliffs"]),
        "config: ttft.sweeps names 'cliffs', which is not a sweep of gpu or cpu rooms",
    ),
    "predicted sweep of documents": (predicted_sweep("many", "docs"), "config: ttft.sweeps names 'many'"),
    "predicted sweep of tokens": (predicted_sweep("long", "tokens"), "config: ttft.sweeps names 'long'"),
    "budgets of an unknown plan": (
        setter(["ttft", "budgets", "plan"], "big"),
        "config: ttft.budgets.plan names 'big', which is not in plans",
    ),
    "GPU cliff not predicted": (
        setter(["ttft", "sweeps"], ["cpu_cliff"]),
        "config: plots.gpu_cliff must name a sweep of gpu rooms in ttft.sweeps, got 'cliff'",
    ),
    "GPU cliff of CPU rooms": (setter(["plots", "gpu_cliff"], "cpu_cliff"), "config: plots.gpu_cliff .* 'cpu_cliff'"),
    "GPU cliff of no sweep": (setter(["plots", "gpu_cliff"], "nowhere"), "config: plots.gpu_cliff .* 'nowhere'"),
    "CPU cliff not predicted": (
        setter(["ttft", "sweeps"], ["cliff"]),
        "config: plots.cpu_cliff must name a sweep of cpu rooms in ttft.sweeps, got 'cpu_cliff'",
    ),
    "CPU cliff of GPU rooms": (setter(["plots", "cpu_cliff"], "cliff"), "config: plots.cpu_cliff .* 'cliff'"),
    "curves at a block size not computed": (
        setter(["plots", "mrc_block_tokens"], 16),
        "config: plots.mrc_block_tokens 16 is no workload's block in mrc",
    ),
}


@pytest.mark.parametrize(("mutate", "message"), TTFT_RULES.values(), ids=TTFT_RULES.keys())
def test_ttft_and_plots_cross_field_rules(unaliased, mutate, message):
    mutate(unaliased)
    validate(unaliased, str(SCHEMA))  # the schema alone lets these through
    with pytest.raises(checks.ConfigError, match=message) as raised:
        checks.check_config(unaliased)
    assert "\n" not in str(raised.value)
    with pytest.raises(checks.ConfigError, match=message):
        checks.check_ttft(unaliased)  # the rule is check_ttft's


# --- The schema's ttft and plots sections ---------------------------------------------------------------------

SETTING = ["ttft", "setting"]
BUDGETS = ["ttft", "budgets"]
TTFT, PLOTS = "instance['ttft']", "instance['plots']"

SCHEMA_REJECTS = {
    "unknown pass order": (setter([*SETTING, "passes"], {"pass1": "forward"}), TTFT),
    "no passes": (setter([*SETTING, "passes"], {}), TTFT),
    "no configs": (setter([*SETTING, "configs"], {}), TTFT),
    "config without cpu": (setter([*SETTING, "configs"], {"baseline": {"gpu_tokens": 21520}}), TTFT),
    "negative gpu room": (setter([*SETTING, "configs"], {"baseline": {"gpu_tokens": -1, "cpu_tokens": 0}}), TTFT),
    "unknown config key": (
        setter([*SETTING, "configs"], {"baseline": {"gpu_tokens": 1, "cpu_tokens": 0, "ram": 1}}),
        TTFT,
    ),
    "setting of 0 documents": (setter([*SETTING, "docs"], 0), TTFT),
    "setting without tokens": (deleter([*SETTING, "tokens"]), TTFT),
    "unknown setting key": (setter([*SETTING, "model"], "qwen"), TTFT),
    "ttft without setting": (deleter(["ttft", "setting"]), TTFT),
    "ttft without sweeps": (deleter(["ttft", "sweeps"]), TTFT),
    "sweeps as a string": (setter(["ttft", "sweeps"], "cliff"), TTFT),
    "duplicate sweep": (setter(["ttft", "sweeps"], ["cliff", "cliff"]), TTFT),
    "bad sweep name": (setter(["ttft", "sweeps"], ["Cliff-2"]), TTFT),
    "negative cpu_gib": (setter([*BUDGETS, "cpu_gib"], [0, -0.5]), TTFT),
    "no budgets": (setter([*BUDGETS, "cpu_gib"], []), TTFT),
    "duplicate budget": (setter([*BUDGETS, "cpu_gib"], [1.5, 1.5]), TTFT),
    "budget as text": (setter([*BUDGETS, "cpu_gib"], ["1.5"]), TTFT),
    "budgets without plan": (deleter([*BUDGETS, "plan"]), TTFT),
    "budgets without cpu_gib": (deleter([*BUDGETS, "cpu_gib"]), TTFT),
    "unknown budgets key": (setter([*BUDGETS, "gpu_gib"], [1]), TTFT),
    "unknown ttft key": (setter(["ttft", "model"], "results/ttft/model.json"), TTFT),
    "missing ttft section": (deleter(["ttft"]), "'ttft' is a required property"),
    "missing plots section": (deleter(["plots"]), "'plots' is a required property"),
    "plots without gpu_cliff": (deleter(["plots", "gpu_cliff"]), PLOTS),
    "plots without cpu_cliff": (deleter(["plots", "cpu_cliff"]), PLOTS),
    "plots without mrc_block_tokens": (deleter(["plots", "mrc_block_tokens"]), PLOTS),
    "block of 0 tokens": (setter(["plots", "mrc_block_tokens"], 0), PLOTS),
    "block as text": (setter(["plots", "mrc_block_tokens"], "256"), PLOTS),
    "fractional block": (setter(["plots", "mrc_block_tokens"], 25.6), PLOTS),
    "bad sweep name for a cliff": (setter(["plots", "gpu_cliff"], "Cliff!"), PLOTS),
    "unknown plots key": (setter(["plots", "ttft_budgets"], True), PLOTS),
}


@pytest.mark.parametrize(("mutate", "where"), SCHEMA_REJECTS.values(), ids=SCHEMA_REJECTS.keys())
def test_schema_rejects(unaliased, mutate, where):
    mutate(unaliased)
    with pytest.raises(WorkflowError) as raised:
        validate(unaliased, str(SCHEMA))
    assert where in str(raised.value)


def test_schema_accepts_the_committed_config_and_optional_budgets(config, unaliased):
    validate(config, str(SCHEMA))
    checks.check_config(config)
    del unaliased["ttft"]["budgets"]
    validate(unaliased, str(SCHEMA))
