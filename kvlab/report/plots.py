"""The figures of results/plots/: each one drawn from committed artifacts, byte for byte the same every run.

The command is ``kvlab plots NAME --out FILE.png INPUT...`` with NAME one of :data:`PLOTS`; the
inputs are the artifacts that plot reads, in the order its function takes them. A figure of times drawn
from the synthetic example (kvlab/measure/example.py; the note under it says so) says so in its titles and
legends too, and a figure of llama-cpp-python's measurement calls its configs by what they are. Matplotlib draws
with the Agg backend and its bundled fonts, and the PNG carries no software tag or date, so the
same inputs and pinned versions give the same bytes.
"""

import inspect
import io
import re
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from kvlab.latency.measurement import read_records  # noqa: E402
from kvlab.util.files import read_bytes, read_json  # noqa: E402

DPI = 100
STYLE = {"figure.figsize": (7.5, 5.0), "axes.grid": True, "grid.alpha": 0.3, "font.size": 9}


def read_object(path, depth=1):
    """A non-empty JSON object of an artifact whose values (``depth`` levels down) are numbers; ValueError
    naming the file if it is something else."""
    document = read_json(path)
    values = [document]
    for _ in range(depth):
        if not all(isinstance(value, dict) and value for value in values):
            raise ValueError(f"{path}: expected {'a JSON object' if depth == 1 else 'JSON objects'} of numbers")
        values = [item for value in values for item in value.values()]
    if not all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in values):
        raise ValueError(f"{path}: expected {'a JSON object' if depth == 1 else 'JSON objects'} of numbers")
    return document


def read_csv(path, *numbers):
    """A CSV table of an artifact, read within the file-size limit; ValueError naming the file if one of the
    columns ``numbers`` is missing, holds text, or holds a number that is missing (an empty cell) or infinite."""
    table = pd.read_csv(io.BytesIO(read_bytes(path)), keep_default_na=False, na_values=[""])
    for column in numbers:
        if column not in table.columns:
            raise ValueError(f"{path}: no column {column}")
        if not pd.api.types.is_numeric_dtype(table[column]) or not np.isfinite(table[column].to_numpy(float)).all():
            raise ValueError(f"{path}: column {column} must hold finite numbers")
    return table


def read_measurement(path):
    """A TTFT measurement in the lab's schema as a table (an error names ``file:line``, as summarize's)."""
    records = [record for _, record in read_records(path)]
    if not records:
        raise ValueError(f"{path}: no requests")
    return pd.DataFrame(records)


def plain_numbers(axis, log=False):
    """The y axis in plain numbers (600, not 6x10^2); on a log scale ticks at 1, 2, 3 and 5 of each decade."""
    if log:
        axis.set_yscale("log")
        axis.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 3.0, 5.0)))
        axis.yaxis.set_minor_formatter(NullFormatter())
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))


def grouped(axis):
    """The x axis with thousands separated (50,110 tokens)."""
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))


def mark(axis, x, y, text, below=False):
    """A point of note (a cliff's edge) with its value beside it, to its left (above it, or below)."""
    axis.plot([x], [y], "o", color="black", markersize=4)
    axis.annotate(text, (x, y), textcoords="offset points", xytext=(-8, -14 if below else 6), ha="right", fontsize=8)


def cliff_edge(rooms, values, best):
    """The smallest room whose value is ``best`` (the cliff's edge), with the room just below it; None if the
    first room already reaches it."""
    edge = next(index for index, value in enumerate(values) if value == best)
    return (rooms[edge - 1], rooms[edge]) if edge else None


# Series that may coincide are told apart by style: the first drawn is wide and pale, each later one narrower
# and drawn over it, each with its own line style and marker, so a line under another still shows at its edges.
SERIES_STYLES = (
    {"linestyle": "-", "marker": "o", "linewidth": 5.0, "markersize": 11, "alpha": 0.35},
    {"linestyle": "--", "marker": "s", "linewidth": 2.6, "markersize": 7.5, "markerfacecolor": "none", "mew": 1.6},
    {"linestyle": ":", "marker": "^", "linewidth": 2.0, "markersize": 5},
    {"linestyle": "-.", "marker": "x", "linewidth": 1.2, "markersize": 6, "mew": 1.4},
)


def runs(values):
    """The runs of consecutive items of ``values`` whose flag is set: ``[(first, last)]`` of ``[(value, flag)]``."""
    found, start, last = [], None, None
    for value, flag in values:
        if flag and start is None:
            start = value
        if not flag and start is not None:
            found.append((start, last))
            start = None
        last = value
    if start is not None:
        found.append((start, last))
    return found


def coinciding(series, index, shown):
    """Where series ``index`` of ``series`` (``{name: (x, y)}``, in drawing order) lies on a later one, in words
    (``shown`` writes runs of x values, ``[(first, last)]``); "" where it lies on none. A series the same as a later
    one throughout names that one only."""
    names = list(series)
    x, y = series[names[index]]
    parts = []
    for other in names[index + 1 :]:
        theirs = dict(zip(*series[other], strict=True))
        same = [(value, value in theirs and theirs[value] == mine) for value, mine in zip(x, y, strict=True)]
        if all(flag for _, flag in same) and len(theirs) == len(same):
            return f"same as {other} throughout"
        spans = runs(same)
        if spans:
            parts.append(f"{other} at {shown(spans)}")
    return f"same as {', as '.join(parts)}" if parts else ""


def draw_series(axis, series, shown, legend_width=40):
    """Lines of ``series`` (``{name: (x, y)}``), each of its own colour and style (SERIES_STYLES), a later one over
    an earlier; each legend entry (right of the axes, lines of ``legend_width`` characters) says where its line
    lies on a later one."""
    for index, name in enumerate(series):
        x, y = series[name]
        note = coinciding(series, index, shown)
        label = "\n".join([name, *textwrap.wrap(f"({note})", legend_width, break_on_hyphens=False)]) if note else name
        style = SERIES_STYLES[index % len(SERIES_STYLES)]
        axis.plot(x, y, color=f"C{index}", label=label, zorder=2 + index, **style)
    outside_legend(axis)


def outside_legend(axis):
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, labelspacing=0.8)


def spans_of(number, unit):
    """A writer of spans of x values for :func:`coinciding`: "0\u201330,065 and 50,110\u201356,000 tokens"."""

    def shown(spans):
        words = [number(first) if first == last else f"{number(first)}\u2013{number(last)}" for first, last in spans]
        return f"{' and '.join(words)} {unit}"

    return shown


TOKENS = spans_of(lambda value: f"{value:,}", "tokens")
GIBIBYTES = spans_of(lambda value: f"{value:g}", "GiB")


SYNTHETIC = "the synthetic example"  # what a figure drawn from kvlab/measure/example.py's measurement calls it


def fitted_to(synthetic):
    return f"TTFT predicted by the model fitted to {SYNTHETIC if synthetic else 'the measurement'}"


def gpu_cliff(cliff, ttft_sweep, *, synthetic=False):
    """Pass-2 GPU hits by GPU room (the lab's cliff sweep) and the predicted pass-2 TTFT."""
    hits = read_object(cliff)
    rooms = [int(room) for room in hits]
    ttft = read_csv(ttft_sweep, "gpu_tokens", "predicted_p50_ms")
    second = ttft[ttft["pass"] == "pass2"]
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True)
    values = list(hits.values())
    top.plot(rooms, values, "o-", color="C0")
    top.set_ylabel("pass-2 GPU hits")
    top.set_title("The GPU cliff: LRU under cyclic access, one token short of the working set")
    bottom.plot(second["gpu_tokens"], second["predicted_p50_ms"], "o-", color="C3")
    bottom.set_ylabel("predicted pass-2 p50 TTFT (ms)")
    bottom.set_title(fitted_to(synthetic), fontsize=8)
    bottom.set_xlabel("GPU room (tokens)")
    plain_numbers(bottom)
    grouped(bottom)
    edge = cliff_edge(rooms, values, max(values))
    if edge:
        times = dict(zip(second["gpu_tokens"], second["predicted_p50_ms"], strict=True))
        for high, room in enumerate(edge):  # below the edge, then at it
            mark(top, room, hits[str(room)], f"{room:,} tokens: {hits[str(room)]} hits", below=bool(high))
            if room in times:
                mark(bottom, room, times[room], f"{room:,} tokens: {times[room]:,.1f} ms", below=not high)
    return figure


def cpu_cliff(policies_cliff, ttft_sweep, *, synthetic=False):
    """Pass-2 recomputes by CPU room, per write policy (a line under another still shows, and its legend says
    where), and the predicted pass-2 TTFT under write-through."""
    misses = read_object(policies_cliff, depth=2)
    ttft = read_csv(ttft_sweep, "cpu_tokens", "predicted_p50_ms")
    second = ttft[ttft["pass"] == "pass2"]
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9.5, 5.0))
    series = {policy: ([int(room) for room in points], list(points.values())) for policy, points in misses.items()}
    draw_series(top, series, TOKENS)
    for policy, (rooms, values) in series.items():
        edge = cliff_edge(rooms, values, min(values))
        if edge:
            mark(top, edge[1], values[rooms.index(edge[1])], f"{policy}: {edge[1]:,} tokens")
    top.set_ylabel("pass-2 recomputes")
    top.set_title("The CPU cliff at the lab's GPU room, per write policy")
    bottom.plot(second["cpu_tokens"], second["predicted_p50_ms"], "o-", color="C3", label="write-through")
    bottom.set_ylabel("predicted pass-2 p50 TTFT (ms)")
    bottom.set_title(fitted_to(synthetic), fontsize=8)
    bottom.set_xlabel("CPU room (tokens)")
    plain_numbers(bottom)
    grouped(bottom)
    outside_legend(bottom)
    return figure


def curves(*paths):
    """Exact LRU curves: the whole run's token hit ratio at every room, GPU tier and CPU tier."""
    figure, (left, right) = plt.subplots(1, 2, sharey=True, figsize=(9.0, 4.5))
    workloads = list(dict.fromkeys(Path(path).parent.name for path in paths))  # one colour per workload
    for path in paths:
        room = "cpu_tokens" if "-cpu-" in Path(path).name else "gpu_tokens"
        table = read_csv(path, room, "token_hit_ratio")
        axis = left if room == "gpu_tokens" else right
        workload = Path(path).parent.name
        color = f"C{workloads.index(workload)}"
        axis.step(table[room], table["token_hit_ratio"], where="post", color=color, label=curve_label(path))
    left.set_title("GPU tier, every GPU room")
    right.set_title("CPU tier (write-through) at a fixed GPU room")
    left.set_ylabel("token hit ratio, whole run")
    for axis, label in ((left, "GPU room (tokens)"), (right, "CPU room (tokens)")):
        axis.set_xlabel(label)
        grouped(axis)
        if axis.lines:
            axis.legend(fontsize=7)
    return figure


CURVE_NAME = r"block(\d+)-(?:gpu|cpu-at-gpu(\d+))"


def curve_label(path):
    """A curve's legend in words, from its file name (results/mrc/<workload>/block<B>-gpu.csv or
    block<B>-cpu-at-gpu<G>.csv)."""
    path = Path(path)
    found = re.fullmatch(CURVE_NAME, path.stem)
    if not found:
        return f"{path.parent.name}, {path.stem}"
    block, gpu = found.groups()
    blocks = f"{int(block):,}-token blocks"
    return f"{path.parent.name}, {blocks}" + (f", GPU room {int(gpu):,}" if gpu else "")


def short_tokens(value, _=None):
    """A room on a log axis: 512, 10k, 1M, 100M."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


TRACE_STYLES = (("-", "o", 9), ("--", "s", 6), (":", "^", 5), ("-.", "D", 4))  # a CPU curve's line, replays' marker


def trace_reuse(table, gpu_curve, *cpu_curves):
    """A real trace's token hit ratio by room: the exact LRU curve of its GPU tier, and of its CPU tier
    (write-through) at each fixed GPU room, on a log scale of rooms, with the replays of the same trace at their
    grid points (``round`` all) drawn on them as a check, and the ceiling: every reuse the trace holds."""
    replay = read_csv(table, "block_tokens", "gpu_tokens", "cpu_tokens", "token_hit_ratio")
    if "round" in replay.columns and (replay["round"] == "all").any():
        replay = replay[replay["round"] == "all"]
    gpu = read_csv(gpu_curve, "gpu_tokens", "token_hit_ratio")
    found = re.fullmatch(CURVE_NAME, Path(gpu_curve).stem)
    if found and (replay["block_tokens"] == int(found.group(1))).any():
        replay = replay[replay["block_tokens"] == int(found.group(1))]  # the replays at the curves' block size
    workload = Path(gpu_curve).parent.name
    figure, (left, right) = plt.subplots(1, 2, sharey=True, figsize=(10.0, 4.8))
    shown = gpu[gpu["gpu_tokens"] > 0]  # a log scale: room 0 (nothing cached) is left out
    left.step(shown["gpu_tokens"], shown["token_hit_ratio"], where="post", color="C0", label="GPU tier, exact LRU")
    alone = replay[replay["cpu_tokens"] == 0]
    left.plot(
        alone["gpu_tokens"],
        alone["token_hit_ratio"],
        "o",
        color="black",
        markerfacecolor="none",
        markersize=9,
        label="replays, no CPU tier",
    )
    ceiling = float(gpu["token_hit_ratio"].max())
    for axis in (left, right):
        axis.axhline(
            ceiling,
            color="dimgrey",
            linestyle=":",
            linewidth=1.2,
            label=f"ceiling, all the reuse it holds: {ceiling:.3f}",
        )
    full = int(gpu["gpu_tokens"][gpu["token_hit_ratio"] == ceiling].min())  # the smallest room for all of it
    if full > 0:
        mark(left, full, ceiling, f"{full:,} tokens", below=True)
    for index, path in enumerate(cpu_curves):
        found = re.fullmatch(CURVE_NAME, Path(path).stem)
        if not found or found.group(2) is None:
            raise ValueError(f"{path}: not a CPU tier's curve (block<B>-cpu-at-gpu<G>.csv)")
        room, color = int(found.group(2)), f"C{index + 1}"
        line, marker, size = TRACE_STYLES[index % len(TRACE_STYLES)]
        cpu = read_csv(path, "cpu_tokens", "token_hit_ratio")
        cpu = cpu[cpu["cpu_tokens"] > 0]
        label = f"CPU tier at GPU room {short_tokens(room)}"
        right.step(cpu["cpu_tokens"], cpu["token_hit_ratio"], where="post", color=color, linestyle=line, label=label)
        points = replay[(replay["gpu_tokens"] == room) & (replay["cpu_tokens"] > 0)]
        right.plot(
            points["cpu_tokens"],
            points["token_hit_ratio"],
            marker,
            color=color,
            markerfacecolor="none",
            markersize=size,
            markeredgewidth=1.4,
            label=f"replays at GPU room {short_tokens(room)}",
        )
    figure.suptitle(f"The {workload} trace: token hit ratio of the whole trace by room (exact LRU curves, replays)")
    left.set_title("GPU tier alone, every GPU room", fontsize=9)
    right.set_title("CPU tier (write-through) at a fixed GPU room: GPU and CPU hits", fontsize=9)
    left.set_ylabel("token hit ratio, whole trace")
    left.set_ylim(bottom=0)
    for axis, label, where in (
        (left, "GPU room (tokens, log scale)", "upper left"),
        (right, "CPU room (tokens, log scale)", "lower right"),
    ):
        axis.set_xscale("log")
        axis.xaxis.set_major_formatter(FuncFormatter(short_tokens))
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_xlabel(label)
        axis.legend(fontsize=7, loc=where)
    return figure


# The real server's configs in words: its `lmcache` config is llama-cpp-python's RAM cache, not LMCache.
LLAMA_CPP = "a llama-cpp-python server"
LLAMA_CPP_CONFIGS = {  # config: (a tick's words, a legend's)
    "baseline": ("no RAM cache", "baseline: no RAM cache"),
    "lmcache": ("RAM cache", "lmcache: the server's RAM cache (llama-cpp-python's LlamaRAMCache)"),
}


def requests_by_pass(measurement, subject=None, configs=None):
    """Every request's TTFT by pass and config, with the medians; ``subject`` names where they come from, and
    ``configs`` gives configs' names in words."""
    configs_in_words = configs or {}
    table = read_measurement(measurement)
    passes = list(dict.fromkeys(table["pass"]))
    configs = list(dict.fromkeys(table["config"]))
    figure, axis = plt.subplots()
    width = 0.8 / max(len(configs), 1)
    for index, config in enumerate(configs):
        mine = table[table["config"] == config]
        label = configs_in_words.get(config, (config, config))[1]
        for position, name in enumerate(passes):
            values = mine[mine["pass"] == name]["ttft_ms"].to_numpy()
            if not len(values):
                continue
            centre = position + (index - (len(configs) - 1) / 2) * width
            spread = [centre + width * 0.6 * ((k % 7) / 6 - 0.5) for k in range(len(values))]  # fixed jitter
            axis.scatter(spread, values, s=12, color=f"C{index}", alpha=0.7, label=label if position == 0 else None)
            median = float(pd.Series(values).median())
            axis.hlines(median, centre - width / 2, centre + width / 2, color="black", linewidth=2)
    axis.set_xticks(range(len(passes)), passes)
    plain_numbers(axis, log=True)
    axis.set_ylabel("TTFT (ms, log scale)")
    of = f" of {subject}" if subject else ""
    axis.set_title(f"TTFT per request{of}, by pass and config (bars: medians)")
    axis.legend()
    return figure


def ttft_per_pass(measurement, *, synthetic=False):
    """Every request's TTFT by pass and config, with the medians (of the synthetic example, if it is one)."""
    return requests_by_pass(measurement, SYNTHETIC if synthetic else None)


def real_ttft_per_pass(measurement):
    """The same figure of a llama-cpp-python server's measurement, its RAM cache called so."""
    return requests_by_pass(measurement, LLAMA_CPP, LLAMA_CPP_CONFIGS)


def compared(table, measured, subject=None, configs=None):
    """The model's per-pass p50 beside the ``measured`` one (its legend's words), per config and pass, with
    predicted / measured; ``subject`` and ``configs`` as :func:`requests_by_pass`'s."""
    configs = configs or {}
    rows = read_csv(table, "measured_p50_ms", "predicted_p50_ms")
    figure, axis = plt.subplots()
    positions = range(len(rows))
    width = 0.38
    bars = axis.bar([p - width / 2 for p in positions], rows["measured_p50_ms"], width, label=f"{measured} p50")
    axis.bar([p + width / 2 for p in positions], rows["predicted_p50_ms"], width, label="predicted p50")
    for bar, value in zip(bars, rows["p50_ratio"], strict=True):
        label = f"x{value:.3f}" if np.isfinite(value) else "n/a"
        axis.annotate(label, (bar.get_x() + width, bar.get_height() * 1.08), ha="center", fontsize=7)
    ticks = [
        f"{config}\n({configs[config][0]})\n{name}" if config in configs else f"{config}\n{name}"
        for config, name in zip(rows["config"], rows["pass"], strict=True)
    ]
    axis.set_xticks(list(positions), ticks)
    plain_numbers(axis, log=True)
    axis.set_ylabel("TTFT p50 (ms, log scale)")
    of = f" of {subject}" if subject else ""
    words = [configs[config][1] for config in dict.fromkeys(rows["config"]) if config in configs]
    axis.set_title(f"Predicted vs {measured} p50{of}, per config and pass\n(labels: predicted / {measured})")
    if words:  # the configs in words, under the legend, over the short bars
        text = "\n".join(
            line
            for config in words
            for line in textwrap.wrap(config, 36, subsequent_indent="  ", break_on_hyphens=False)
        )
        axis.text(0.985, 0.75, text, transform=axis.transAxes, ha="right", va="top", ma="left", fontsize=8)
    axis.legend()
    return figure


def predicted_vs_measured(table, *, synthetic=False):
    """The model's per-pass p50 beside the measured one (the synthetic example's, if it is one), per config and
    pass, with predicted / measured."""
    return compared(table, "synthetic example" if synthetic else "measured")


def real_predicted_vs_measured(table):
    """The same figure of a llama-cpp-python server's measurement, its RAM cache called so."""
    return compared(table, "measured", LLAMA_CPP, LLAMA_CPP_CONFIGS)


def ttft_budgets(budgets, *, synthetic=False):
    """Predicted p50 TTFT and token hit ratio per round across the plan's CPU budgets (a line under another still
    shows, and its legend says where)."""
    rows = read_csv(budgets, "cpu_gib", "predicted_p50_ms", "token_hit_ratio")
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9.5, 5.5))
    rounds = list(rows.groupby("round", sort=False))
    for axis, column in ((top, "predicted_p50_ms"), (bottom, "token_hit_ratio")):
        draw_series(axis, {name: (list(mine["cpu_gib"]), list(mine[column])) for name, mine in rounds}, GIBIBYTES)
    top.set_ylabel("predicted p50 TTFT (ms)")
    plain_numbers(top)
    top.set_title(f"What a CPU budget buys: p50 TTFT and reuse per round\n({fitted_to(synthetic)})")
    bottom.set_ylabel("token hit ratio")
    bottom.set_xlabel("CPU budget (GiB)")
    return figure


# TTFT priced from the hardware (kvlab ttft predict, kvlab ttft budgets --gpu-system): the tiers of a request in
# the handout's words, and each request's tier from its split (results/ttft/hardware/lab-<config>-requests.csv).
HANDOUT_TIERS = {"recompute": "recompute", "cpu_load": "CPU load", "gpu_hit": "GPU hit"}


def request_tier(row):
    """A priced request's tier: all computed (recompute), a load with nothing computed (CPU load), all on the GPU
    (GPU hit: the engine computes only the last token), or a mix of them (None)."""
    if row["computed_tokens"] == row["input_tokens"]:
        return "recompute"
    if row["cpu_hit_tokens"] > 0 and row["computed_tokens"] == 0:
        return "cpu_load"
    if row["gpu_hit_tokens"] == row["input_tokens"]:
        return "gpu_hit"
    return None


def priced_lab(priced):
    """``[(config, prediction, requests)]`` of the lab's priced configs, from pairs of files: each config's JSON
    (results/ttft/hardware/lab-<config>.json) and its requests' CSV."""
    if len(priced) % 2:
        raise ValueError("expected each config's prediction (JSON) and its requests (CSV), in pairs")
    configs = []
    for document, requests in zip(priced[0::2], priced[1::2], strict=True):
        prediction = read_json(document)
        if not isinstance(prediction, dict) or not isinstance(prediction.get("rounds"), list):
            raise ValueError(f"{document}: expected a prediction of kvlab ttft predict (JSON with rounds)")
        columns = ("input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens", "ttft_ms")
        table = read_csv(requests, *columns)
        if "round" not in table.columns:
            raise ValueError(f"{requests}: no column round")
        name = Path(document).stem.removeprefix("lab-")
        configs.append((name, prediction, table))
    return configs


def ttft_hardware_lab(handout, prediction, requests, *more):
    """The lab's passes priced from the hardware, per config (``prediction`` and ``requests`` of each, in pairs):
    each pass's p50 beside the handout's per-tier latencies (top), and each tier's priced TTFT beside the handout's,
    with handout / priced (bottom); what differs is said in the titles."""
    latencies = read_json(handout)
    if not isinstance(latencies, dict) or not isinstance(latencies.get("latency_ms"), dict):
        raise ValueError(f"{handout}: expected the handout's latency_ms")
    reference = {tier: float(latencies["latency_ms"][tier]) for tier in HANDOUT_TIERS}
    configs = priced_lab([prediction, requests, *more])
    latency = configs[0][1]["latency"]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(9.5, 7.5), height_ratios=(3, 2))
    passes = [entry["round"] for entry in configs[0][1]["rounds"]]
    width = 0.8 / len(configs)
    for index, (name, prediction, _) in enumerate(configs):
        p50 = {entry["round"]: entry["p50_ms"] for entry in prediction["rounds"]}
        positions = [position + (index - (len(configs) - 1) / 2) * width for position in range(len(passes))]
        values = [p50.get(round_name, 0.0) for round_name in passes]
        bars = top.bar(positions, values, width * 0.95, color=f"C{index}", label=f"{name}: priced p50")
        for bar, value in zip(bars, values, strict=True):
            top.annotate(f"{value:,.1f}", (bar.get_x() + bar.get_width() / 2, value * 1.08), ha="center", fontsize=7)
    for tier, words in HANDOUT_TIERS.items():
        top.axhline(reference[tier], color="dimgrey", linestyle="--", linewidth=1.0)
        top.annotate(
            f"handout's {words}: {reference[tier]:,.1f} ms",
            (1.0, reference[tier]),
            xycoords=("axes fraction", "data"),
            xytext=(-4, 3),
            textcoords="offset points",
            ha="right",
            fontsize=7,
            color="dimgrey",
        )
    top.set_xticks(range(len(passes)), passes)
    plain_numbers(top, log=True)
    top.set_ylim(top=max(reference.values()) * 3)
    top.set_ylabel("TTFT p50 per pass (ms, log scale)")
    top.legend(fontsize=7, loc="upper left")
    model = Path(latency["model_config"]).parent.name
    top.set_title(
        f"The lab's passes priced from the hardware: {model} on one {latency['gpu_system']}, {latency['engine']}"
        f" (tp {latency['tp']})\nprefill: {latency['prefill']}; loads at {latency['transfer']['peak_gbps']:g} GB/s"
        f" ({latency['transfer']['peak_from']})",
        fontsize=8,
    )
    groups = []  # (tier, config, priced median ms)
    for tier in HANDOUT_TIERS:
        for name, _, table in configs:
            mine = table[[request_tier(row) == tier for _, row in table.iterrows()]]
            if len(mine):
                groups.append((tier, name, float(mine["ttft_ms"].median())))
    tiers = list(dict.fromkeys(tier for tier, _, _ in groups))
    names = [name for name, _, _ in configs]
    width = 0.8 / (len(names) + 1)
    for position, tier in enumerate(tiers):
        centres = [position + (k - len(names) / 2) * width for k in range(len(names) + 1)]  # the handout's first
        bottom.bar(centres[0], reference[tier], width * 0.95, color="lightgrey", edgecolor="dimgrey")
        bottom.annotate(f"{reference[tier]:,.1f}", (centres[0], reference[tier] * 1.1), ha="center", fontsize=7)
        for k, name in enumerate(names, start=1):
            found = [ms for t, n, ms in groups if t == tier and n == name]
            if not found:
                continue
            bottom.bar(centres[k], found[0], width * 0.95, color=f"C{k - 1}")
            ratio = reference[tier] / found[0] if found[0] else float("nan")
            label = f"{found[0]:,.2f}\nx{ratio:,.1f}" if np.isfinite(ratio) else f"{found[0]:,.2f}"
            bottom.annotate(label, (centres[k], found[0] * 1.1), ha="center", fontsize=7)
    handles = [plt.Rectangle((0, 0), 1, 1, color="lightgrey", ec="dimgrey")]
    handles += [plt.Rectangle((0, 0), 1, 1, color=f"C{k}") for k in range(len(names))]
    labels = ["handout (its measurement)", *(f"{name}: priced median" for name in names)]
    bottom.legend(handles, labels, fontsize=7, loc="upper right")
    bottom.set_xticks(range(len(tiers)), [HANDOUT_TIERS[tier] for tier in tiers])
    plain_numbers(bottom, log=True)
    bottom.set_ylim(top=max(reference.values()) * 4)
    bottom.set_ylabel("TTFT per tier (ms, log scale)")
    bottom.set_title(
        "Per tier: the handout's TTFT (measured end to end on its server) beside the priced one (kernels and the"
        " link only: no\nserver, tokenizer or queue; a GPU hit computes only the last token); labels: priced ms,"
        " handout / priced",
        fontsize=8,
    )
    return figure


def ttft_hardware_budgets(budgets):
    """Priced p50 and p99 TTFT and the token hit ratio against the CPU budget (the whole workload's, and each round's
    where it has more than one)."""
    rows = read_csv(budgets, "cpu_gib", "predicted_p50_ms", "predicted_p99_ms", "token_hit_ratio")
    rounds = list(dict.fromkeys(rows["round"]))
    shown = rounds if len([name for name in rounds if name != "all"]) > 1 else ["all"]
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9.5, 6.0))
    times, ratios = {}, {}
    for name in shown:
        mine = rows[rows["round"] == name]
        words = "all requests" if name == "all" else name
        budgets_gib = list(mine["cpu_gib"])
        times[f"{words}: p99"] = (budgets_gib, list(mine["predicted_p99_ms"]))
        times[f"{words}: p50"] = (budgets_gib, list(mine["predicted_p50_ms"]))
        ratios[words] = (budgets_gib, list(mine["token_hit_ratio"]))
    draw_series(top, times, GIBIBYTES)
    draw_series(bottom, ratios, GIBIBYTES)
    for name in shown:  # each point's value, beside it
        mine = rows[rows["round"] == name]
        for column in ("predicted_p50_ms", "predicted_p99_ms"):
            for x, y in zip(mine["cpu_gib"], mine[column], strict=True):
                top.annotate(f"{y:,.0f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    plain_numbers(top, log=True)
    top.set_ylabel("priced TTFT (ms, log scale)")
    source = ", ".join(dict.fromkeys(rows["latency_source"])) if "latency_source" in rows.columns else "hardware"
    top.set_title(f"What a CPU budget buys, priced from the hardware ({source}): p50 and p99 TTFT", fontsize=9)
    bottom.set_ylabel("token hit ratio")
    bottom.set_xlabel("CPU budget per GPU (GiB)")
    return figure


# A trace under load through one engine instance (kvlab simulate, results/ttft/hardware/simulate-<workload>/): each
# point's JSON, and its times' percentiles (--percentiles).
def simulation(path):
    """A ``kvlab simulate`` output; ValueError naming the file if it is something else."""
    document = read_json(path)
    keys = ("ttft_ms", "cache", "arrivals", "latency")
    if not isinstance(document, dict) or not all(isinstance(document.get(key), dict) for key in keys):
        raise ValueError(f"{path}: expected the output of kvlab simulate (JSON with {', '.join(keys)})")
    return document


def cpu_tier(document):
    """A simulation's CPU tier in words: none, or its blocks and GiB."""
    cache = document["cache"]
    if not cache["cpu_blocks"]:
        return "no CPU tier"
    gib = cache["cpu_tokens"] * document["latency"]["kv_bytes_per_token"] / 2**30
    return f"CPU tier {cache['cpu_blocks']:,} blocks ({gib:,.1f} GiB)"


def simulated_setting(document):
    """The model, system and engine, and the GPU pool of a simulation, in words (the figures' titles)."""
    latency, cache = document["latency"], document["cache"]
    model = Path(latency["model_config"]).parent.name
    return (
        f"{model} on one {latency['gpu_system']}, {latency['engine']}; GPU pool {cache['gpu_blocks']:,} blocks of"
        f" {cache['block_tokens']:,} tokens"
    )


# The CDF lines of a CPU tier each, wide and pale first, each later one narrower over it (no markers: a line of
# 103 percentiles).
CDF_STYLES = (
    {"linestyle": "-", "linewidth": 5.0, "alpha": 0.35},
    {"linestyle": "--", "linewidth": 2.4},
    {"linestyle": ":", "linewidth": 2.0},
    {"linestyle": "-.", "linewidth": 1.2},
)


def simulate_ttft_budgets(simulated, percentiles, *more):
    """The TTFT distribution per CPU tier at one load (each tier's simulation and its percentiles, in pairs): the
    share of requests whose TTFT is at most x, whole (top, log scale) and its tail from p90 (bottom)."""
    files = [simulated, percentiles, *more]
    if len(files) % 2:
        raise ValueError("expected each CPU tier's simulation (JSON) and its percentiles (CSV), in pairs")
    tiers = [
        (simulation(document), read_csv(table, "percentile", "ttft_ms"))
        for document, table in zip(files[0::2], files[1::2], strict=True)
    ]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(9.5, 7.0), height_ratios=(3, 2))
    for index, (document, table) in enumerate(tiers):
        ttft, hits = document["ttft_ms"], document["hit_ratios"]["kvlab"]
        label = (
            f"{cpu_tier(document)}: p50 {ttft['p50']:,.0f} ms, p99 {ttft['p99']:,.0f} ms;"
            f" hits GPU {hits['gpu']:.1%}, CPU {hits['cpu']:.1%}; {document['preemptions']:,} preemptions"
        )
        style = {"color": f"C{index}", "zorder": 2 + index, **CDF_STYLES[index % len(CDF_STYLES)]}
        top.plot(table["ttft_ms"], table["percentile"], label=label, **style)
        tail = table[table["percentile"] >= 90]
        bottom.plot(tail["ttft_ms"], tail["percentile"], **style)
    top.set_xscale("log")
    top.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    top.set_ylabel("requests with at most this TTFT (%)")
    top.legend(fontsize=7, loc="upper left")
    arrivals = tiers[0][0]
    top.set_title(
        f"TTFT per CPU tier under load: {arrivals['workload'].get('trace', arrivals['workload']['source'])} at"
        f" {arrivals['requests_per_s']:,.2f} requests/s (the trace's clock x{arrivals['arrivals']['speedup']:g})"
        f"\n{simulated_setting(arrivals)}",
        fontsize=8,
    )
    grouped(bottom)
    bottom.set_ylabel("requests (%), the tail")
    bottom.set_xlabel("TTFT (ms): queueing, loads and prefill")
    return figure


def simulate_ttft_load(first, *more):
    """TTFT p99 and p50 against the load, per CPU tier (top), and the preemptions (bottom), from the simulations of
    each CPU tier at each load; a line under another still shows, and its legend says where."""
    documents = [simulation(path) for path in (first, *more)]
    tiers = {}
    for document in documents:
        tiers.setdefault(cpu_tier(document), []).append(document)
    times, preempted = {}, {}
    for tier, mine in tiers.items():
        loads = [document["arrivals"]["speedup"] for document in mine]
        times[f"{tier}: p99"] = (loads, [document["ttft_ms"]["p99"] for document in mine])
        times[f"{tier}: p50"] = (loads, [document["ttft_ms"]["p50"] for document in mine])
        preempted[tier] = (loads, [document["preemptions"] for document in mine])
    shown = spans_of(lambda value: f"x{value:g}", "the trace's clock")
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9.5, 6.5), height_ratios=(3, 2))
    draw_series(top, times, shown)
    draw_series(bottom, preempted, shown)
    for index, (loads, values) in enumerate(
        times.values()
    ):  # each point's value: the first tier's above, the next's below
        for x, y in zip(loads, values, strict=True):
            offset = (0, 6) if index // 2 % 2 == 0 else (0, -12)
            top.annotate(f"{y:,.0f}", (x, y), textcoords="offset points", xytext=offset, ha="center", fontsize=7)
    plain_numbers(top, log=True)
    drawn = [value for _, values in times.values() for value in values]
    top.set_ylim(min(drawn) / 1.3, max(drawn) * 1.3)  # room for the labels above and below
    top.set_ylabel("TTFT (ms, log scale)")
    top.set_title(f"TTFT under load, with and without the CPU tier\n{simulated_setting(documents[0])}", fontsize=8)
    rates = {}  # each load's requests per second (the trace's, sped up: the same for every tier)
    for document in documents:
        rates.setdefault(document["arrivals"]["speedup"], document["requests_per_s"])
    bottom.set_xticks(list(rates), [f"x{load:g}\n{rate:,.2f} req/s" for load, rate in rates.items()])
    plain_numbers(bottom)
    bottom.set_ylabel("preemptions")
    bottom.set_xlabel("load: the trace's clock sped up (requests per second)")
    return figure


PLOTS = {
    "gpu_cliff": gpu_cliff,
    "cpu_cliff": cpu_cliff,
    "mrc": curves,
    "ttft_per_pass": ttft_per_pass,
    "predicted_vs_measured": predicted_vs_measured,
    "ttft_budgets": ttft_budgets,
    "ttft_hardware_lab": ttft_hardware_lab,  # priced from the hardware, no fit
    "ttft_hardware_budgets": ttft_hardware_budgets,
    "simulate_ttft_budgets": simulate_ttft_budgets,  # a trace under load through one engine instance
    "simulate_ttft_load": simulate_ttft_load,
    "real_ttft_per_pass": real_ttft_per_pass,  # the same figures of a real server's measurement
    "real_predicted_vs_measured": real_predicted_vs_measured,
    "trace_reuse": trace_reuse,
}


def png(figure):
    """The figure's PNG bytes, without the software tag (the only varying metadata)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def is_synthetic(note):
    """Whether a figure's note says its data come from the synthetic example (the pipeline's note for it does)."""
    return "synthetic" in (note or "").lower()


def figure_of(name, inputs, note=None):
    """The figure of plot ``name`` from its input artifacts, with ``note`` (e.g. where its data come from) under it;
    a plot of measured times drawn from the synthetic example (its note says so) says so in its titles and
    legends too. ValueError naming the inputs if they cannot be drawn."""
    plot = PLOTS[name]
    options = {"synthetic": True} if is_synthetic(note) and "synthetic" in inspect.signature(plot).parameters else {}
    with plt.rc_context(STYLE):
        try:
            figure = plot(*inputs, **options)
            figure.tight_layout(rect=(0, 0.04, 1, 1) if note else None)
            if note:
                figure.text(0.5, 0.012, note, ha="center", va="bottom", fontsize=8, color="dimgrey")
        except ValueError as error:  # an input file that cannot be read names itself
            if any(str(path) in str(error) for path in inputs):
                raise
            raise ValueError(f"{name}: cannot draw from {' '.join(map(str, inputs))}: {error}") from None
        except (KeyError, TypeError, AttributeError, IndexError) as error:  # an input of the wrong shape
            raise ValueError(
                f"{name}: cannot draw from {' '.join(map(str, inputs))}: {type(error).__name__} {error}"
            ) from None
        return figure


def draw(name, inputs, note=None):
    """The PNG bytes of :func:`figure_of`."""
    with plt.rc_context(STYLE):
        return png(figure_of(name, inputs, note))
