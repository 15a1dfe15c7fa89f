"""The figures of results/plots/: each one drawn from committed artifacts, byte for byte the same every run.

The command is ``kvlab plots NAME --out FILE.png INPUT...`` with NAME one of :data:`PLOTS`; the
inputs are the artifacts that plot reads, in the order its function takes them. Matplotlib draws
with the Agg backend and its bundled fonts, and the PNG carries no software tag or date, so the
same inputs and pinned versions give the same bytes.
"""

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from kvlab.files import lines, parse_json, read_bytes, read_json  # noqa: E402

DPI = 100
STYLE = {"figure.figsize": (7.5, 5.0), "axes.grid": True, "grid.alpha": 0.3, "font.size": 9}


def read_object(path):
    """A JSON object of an artifact; ValueError naming the file if it is something else."""
    document = read_json(path)
    if not isinstance(document, dict) or not document:
        raise ValueError(f"{path}: expected a non-empty JSON object")
    return document


def read_csv(path):
    """A CSV table of an artifact, read within the file-size limit; only an empty cell is missing, and an
    infinite number is a ValueError naming the file."""
    table = pd.read_csv(io.BytesIO(read_bytes(path)), keep_default_na=False, na_values=[""])
    if np.isinf(table.select_dtypes("number").to_numpy(dtype=float)).any():
        raise ValueError(f"{path}: a number is not finite")
    return table


def read_jsonl(path):
    """A JSON-lines artifact as a table, each line strict JSON (an error names ``file:line``)."""
    return pd.DataFrame([parse_json(raw, f"{path}:{number}") for number, raw in lines(path) if raw.strip()])


def gpu_cliff(cliff, ttft_sweep):
    """Pass-2 GPU hits by GPU room (the lab's cliff sweep) and the predicted pass-2 TTFT."""
    hits = read_object(cliff)
    rooms = [int(room) for room in hits]
    ttft = read_csv(ttft_sweep)
    second = ttft[ttft["pass"] == "pass2"]
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True)
    top.plot(rooms, list(hits.values()), "o-", color="C0")
    top.set_ylabel("pass-2 GPU hits (of 10)")
    top.set_title("The GPU cliff: LRU under cyclic access, one token short of the working set")
    bottom.plot(second["gpu_tokens"], second["predicted_p50_ms"], "o-", color="C3")
    bottom.set_ylabel("predicted pass-2 p50 TTFT (ms)")
    bottom.set_xlabel("GPU room (tokens)")
    for axis in (top, bottom):
        axis.axvline(rooms[-1], color="grey", linestyle=":", linewidth=1)
    return figure


def cpu_cliff(policies_cliff, ttft_sweep):
    """Pass-2 recomputes by CPU room, per write policy, and the predicted pass-2 TTFT under write-through."""
    misses = read_object(policies_cliff)
    ttft = read_csv(ttft_sweep)
    second = ttft[ttft["pass"] == "pass2"]
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True)
    for index, (policy, points) in enumerate(misses.items()):
        rooms = [int(room) for room in points]
        top.plot(rooms, list(points.values()), "o-", color=f"C{index}", label=policy, alpha=0.8)
    top.set_ylabel("pass-2 recomputes (of 10)")
    top.set_title("The CPU cliff at the lab's GPU room, per write policy")
    top.legend()
    bottom.plot(second["cpu_tokens"], second["predicted_p50_ms"], "o-", color="C3", label="write-through")
    bottom.set_ylabel("predicted pass-2 p50 TTFT (ms)")
    bottom.set_xlabel("CPU room (tokens)")
    bottom.legend()
    return figure


def curves(*paths):
    """Exact LRU curves: the whole run's token hit ratio at every room, GPU tier and CPU tier."""
    figure, (left, right) = plt.subplots(1, 2, sharey=True, figsize=(9.0, 4.5))
    workloads = list(dict.fromkeys(Path(path).parent.name for path in paths))  # one colour per workload
    for path in paths:
        table = read_csv(path)
        room = table.columns[0]  # gpu_tokens or cpu_tokens
        axis = left if room == "gpu_tokens" else right
        workload = Path(path).parent.name
        color = f"C{workloads.index(workload)}"
        axis.step(
            table[room], table["token_hit_ratio"], where="post", color=color, label=f"{workload}, {Path(path).stem}"
        )
    left.set_title("GPU tier, every GPU room")
    right.set_title("CPU tier (write-through) at a fixed GPU room")
    left.set_ylabel("token hit ratio, whole run")
    for axis, label in ((left, "GPU room (tokens)"), (right, "CPU room (tokens)")):
        axis.set_xlabel(label)
        if axis.lines:
            axis.legend(fontsize=7)
    return figure


def ttft_per_pass(measurement):
    """Every measured request's TTFT by pass and config, with the medians."""
    table = read_jsonl(measurement)
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
    axis.set_yscale("log")
    axis.set_ylabel("TTFT (ms, log scale)")
    axis.set_title("TTFT per request, by pass and config (bars: medians)")
    axis.legend()
    return figure


def predicted_vs_measured(table):
    """The model's per-pass p50 beside the measured one, per config and pass, with predicted / measured."""
    rows = read_csv(table)
    figure, axis = plt.subplots()
    positions = range(len(rows))
    width = 0.38
    measured = axis.bar([p - width / 2 for p in positions], rows["measured_p50_ms"], width, label="measured p50")
    axis.bar([p + width / 2 for p in positions], rows["predicted_p50_ms"], width, label="predicted p50")
    for bar, value in zip(measured, rows["p50_ratio"], strict=True):
        axis.annotate(f"x{value:.3f}", (bar.get_x() + width, bar.get_height() * 1.08), ha="center", fontsize=7)
    axis.set_xticks(list(positions), [f"{c}\n{p}" for c, p in zip(rows["config"], rows["pass"], strict=True)])
    axis.set_yscale("log")
    axis.set_ylabel("TTFT p50 (ms, log scale)")
    axis.set_title("Predicted vs measured p50 per config and pass (labels: predicted / measured)")
    axis.legend()
    return figure


def ttft_budgets(budgets):
    """Predicted TTFT per round across the plan's CPU budgets."""
    rows = read_csv(budgets)
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True)
    for index, (name, mine) in enumerate(rows.groupby("round", sort=False)):
        top.plot(mine["cpu_gb"], mine["predicted_mean_ms"], "o-", color=f"C{index}", label=name)
        bottom.plot(mine["cpu_gb"], mine["token_hit_ratio"], "o-", color=f"C{index}", label=name)
    top.set_ylabel("predicted mean TTFT (ms)")
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
}


def png(figure):
    """The figure's PNG bytes, without the software tag (the only varying metadata)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def draw(name, inputs):
    """The PNG bytes of plot ``name`` from its input artifacts; ValueError naming them if they cannot be drawn."""
    with plt.rc_context(STYLE):
        try:
            figure = PLOTS[name](*inputs)
            figure.tight_layout()
        except ValueError as error:  # an input file that cannot be read names itself
            if any(str(path) in str(error) for path in inputs):
                raise
            raise ValueError(f"{name}: cannot draw from {' '.join(map(str, inputs))}: {error}") from None
        except (KeyError, TypeError, AttributeError, IndexError) as error:  # an input of the wrong shape
            raise ValueError(
                f"{name}: cannot draw from {' '.join(map(str, inputs))}: {type(error).__name__} {error}"
            ) from None
        return png(figure)
