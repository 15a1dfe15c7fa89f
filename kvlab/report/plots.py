"""The figures of results/plots/: each one drawn from committed artifacts, byte for byte the same every run.

The command is ``kvlab plots NAME --out FILE.png INPUT...`` with NAME one of :data:`PLOTS`; the
inputs are the artifacts that plot reads, in the order its function takes them. Matplotlib draws
with the Agg backend and its bundled fonts, and the PNG carries no software tag or date, so the
same inputs and pinned versions give the same bytes.
"""

import io
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from kvlab.files import read_bytes, read_json  # noqa: E402
from kvlab.summarize import read_records  # noqa: E402

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


def gpu_cliff(cliff, ttft_sweep):
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


def cpu_cliff(policies_cliff, ttft_sweep):
    """Pass-2 recomputes by CPU room, per write policy, and the predicted pass-2 TTFT under write-through."""
    misses = read_object(policies_cliff, depth=2)
    ttft = read_csv(ttft_sweep, "cpu_tokens", "predicted_p50_ms")
    second = ttft[ttft["pass"] == "pass2"]
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True)
    for index, (policy, points) in enumerate(misses.items()):
        rooms = [int(room) for room in points]
        values = list(points.values())
        top.plot(rooms, values, "o-", color=f"C{index}", label=policy, alpha=0.8)
        edge = cliff_edge(rooms, values, min(values))
        if edge:
            mark(top, edge[1], points[str(edge[1])], f"{policy}: {edge[1]:,} tokens")
    top.set_ylabel("pass-2 recomputes")
    top.set_title("The CPU cliff at the lab's GPU room, per write policy")
    top.legend()
    bottom.plot(second["cpu_tokens"], second["predicted_p50_ms"], "o-", color="C3", label="write-through")
    bottom.set_ylabel("predicted pass-2 p50 TTFT (ms)")
    bottom.set_xlabel("CPU room (tokens)")
    plain_numbers(bottom)
    grouped(bottom)
    bottom.legend()
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


def curve_label(path):
    """A curve's legend in words, from its file name (results/mrc/<workload>/block<B>-gpu.csv or
    block<B>-cpu-at-gpu<G>.csv)."""
    path = Path(path)
    found = re.fullmatch(r"block(\d+)-(?:gpu|cpu-at-gpu(\d+))", path.stem)
    if not found:
        return f"{path.parent.name}, {path.stem}"
    block, gpu = found.groups()
    blocks = f"{int(block):,}-token blocks"
    return f"{path.parent.name}, {blocks}" + (f", GPU room {int(gpu):,}" if gpu else "")


def ttft_per_pass(measurement):
    """Every measured request's TTFT by pass and config, with the medians."""
    table = read_measurement(measurement)
    passes = list(dict.fromkeys(table["pass"]))
    configs = list(dict.fromkeys(table["config"]))
    figure, axis = plt.subplots()
    width = 0.8 / max(len(configs), 1)
    for index, config in enumerate(configs):
        mine = table[table["config"] == config]
        for position, name in enumerate(passes):
            values = mine[mine["pass"] == name]["ttft_ms"].to_numpy()
            if not len(values):
                continue
            centre = position + (index - (len(configs) - 1) / 2) * width
            spread = [centre + width * 0.6 * ((k % 7) / 6 - 0.5) for k in range(len(values))]  # fixed jitter
            axis.scatter(spread, values, s=12, color=f"C{index}", alpha=0.7, label=config if position == 0 else None)
            median = float(pd.Series(values).median())
            axis.hlines(median, centre - width / 2, centre + width / 2, color="black", linewidth=2)
    axis.set_xticks(range(len(passes)), passes)
    plain_numbers(axis, log=True)
    axis.set_ylabel("TTFT (ms, log scale)")
    axis.set_title("TTFT per request, by pass and config (bars: medians)")
    axis.legend()
    return figure


def predicted_vs_measured(table):
    """The model's per-pass p50 beside the measured one, per config and pass, with predicted / measured."""
    rows = read_csv(table, "measured_p50_ms", "predicted_p50_ms")
    figure, axis = plt.subplots()
    positions = range(len(rows))
    width = 0.38
    measured = axis.bar([p - width / 2 for p in positions], rows["measured_p50_ms"], width, label="measured p50")
    axis.bar([p + width / 2 for p in positions], rows["predicted_p50_ms"], width, label="predicted p50")
    for bar, value in zip(measured, rows["p50_ratio"], strict=True):
        label = f"x{value:.3f}" if np.isfinite(value) else "n/a"
        axis.annotate(label, (bar.get_x() + width, bar.get_height() * 1.08), ha="center", fontsize=7)
    axis.set_xticks(list(positions), [f"{c}\n{p}" for c, p in zip(rows["config"], rows["pass"], strict=True)])
    plain_numbers(axis, log=True)
    axis.set_ylabel("TTFT p50 (ms, log scale)")
    axis.set_title("Predicted vs measured p50 per config and pass (labels: predicted / measured)")
    axis.legend()
    return figure


def ttft_budgets(budgets):
    """Predicted TTFT per round across the plan's CPU budgets."""
    rows = read_csv(budgets, "cpu_gb", "predicted_mean_ms", "token_hit_ratio")
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True)
    for index, (name, mine) in enumerate(rows.groupby("round", sort=False)):
        top.plot(mine["cpu_gb"], mine["predicted_mean_ms"], "o-", color=f"C{index}", label=name)
        bottom.plot(mine["cpu_gb"], mine["token_hit_ratio"], "o-", color=f"C{index}", label=name)
    top.set_ylabel("predicted mean TTFT (ms)")
    plain_numbers(top)
    top.set_title("What a CPU budget buys: predicted TTFT and reuse per round")
    top.legend()
    bottom.set_ylabel("token hit ratio")
    bottom.set_xlabel("CPU budget (GiB)")
    return figure


PLOTS = {
    "gpu_cliff": gpu_cliff,
    "cpu_cliff": cpu_cliff,
    "mrc": curves,
    "ttft_per_pass": ttft_per_pass,
    "predicted_vs_measured": predicted_vs_measured,
    "ttft_budgets": ttft_budgets,
    "real_ttft_per_pass": ttft_per_pass,  # the same figures of a real server's measurement
    "real_predicted_vs_measured": predicted_vs_measured,
}


def png(figure):
    """The figure's PNG bytes, without the software tag (the only varying metadata)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def draw(name, inputs, note=None):
    """The PNG bytes of plot ``name`` from its input artifacts, with ``note`` (e.g. where its data come from)
    under it; ValueError naming the inputs if they cannot be drawn."""
    with plt.rc_context(STYLE):
        try:
            figure = PLOTS[name](*inputs)
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
        return png(figure)
