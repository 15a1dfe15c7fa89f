"""`make report`: Snakemake's HTML report of the pipeline's results, with the captions of report/*.rst.

The report is built in a copy of the regenerated project (tests/conftest.py: its results are checked fresh
by tests/test_workflow.py), as `make report` builds it after `make run`: every artifact has its provenance.
"""

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import jinja2
import pytest
from conftest import ROOT, load_config, tool

from kvlab.report import plots
from kvlab.workflow import commands, paths

# The key sentence of each artifact's caption (report/*.rst, rendered with the artifact's wildcards).
CAPTIONS = {
    "results/cyclic.json": "Finding 1: reading ten 5,011-token documents twice",
    "results/baseline.json": "A third pass in reverse hits only the four most recent documents",
    "results/offload.json": "Finding 3, in the simulator",
    "results/cliff.json": "Finding 2, the cliff",
    "results/cpu_cliff.json": "Under the lab's write-through rule the CPU tier has the same cliff",
    "results/measured.json": "Finding 3 on the synthetic example",
    "results/real/measured.json": "server's RAM cache (llama-cpp-python's",
    "results/policies/cpu_cliff.json": "The policy answer: write-back",
    "results/plan/lab.json": "The planner's answer for the plan",
    "results/plan/lab_documents.json": "The planner's answer for the plan",
    "results/ttft/predicted_vs_measured.csv": "The TTFT model against the synthetic example",
    "results/real/predicted_vs_measured.csv": "The TTFT model against the real server's measurement",
    "results/plots/gpu_cliff.png": "Findings 1 and 2",
    "results/plots/cpu_cliff.png": "The policy answer: write-back clears pass 2",
    "results/plots/mrc.png": "The exact LRU curves",
    "results/plots/ttft_per_pass.png": "Finding 3 on the synthetic example",
    "results/plots/predicted_vs_measured.png": "The TTFT model's per-pass p50",
    "results/plots/ttft_budgets.png": "The planner's answer in time",
    "results/plots/real_ttft_per_pass.png": "A real llama-cpp-python server",
    "results/plots/real_predicted_vs_measured.png": "against the real",
    "results/plots/trace_reuse.png": "A real trace, Mooncake's conversation trace",
}


@pytest.fixture(scope="module")
def built(regenerated, tmp_path_factory):
    """A copy of the regenerated project, and `snakemake --report report.html` run in it."""
    copy = tmp_path_factory.mktemp("kvlab-report") / "copy"
    shutil.copytree(regenerated, copy, symlinks=True)
    done = tool("snakemake", "--report", "report.html", cwd=copy)
    return copy, done


@pytest.fixture(scope="module")
def html(built):
    copy, done = built
    assert done.returncode == 0, done.stdout + done.stderr
    return (copy / "report.html").read_text(encoding="utf-8")


def script_variable(html, name):
    """The JSON value of ``var X = ...`` in the report's ``<script id="name">``."""
    found = re.search(rf'<script id="{name}">\s*var \w+ = (.*?);?\s*</script>', html, flags=re.DOTALL)
    assert found, name
    return json.loads(found.group(1))


def report_artifacts(config):
    """Every artifact marked report() in rules/*.smk, as the config names them."""
    lab = [f"results/{name}.json" for name in [*config["runs"], *config["sweeps"], "measured"]]
    planner = [paths.POLICY_CLIFF, *map(paths.plan_path, config["plans"]), paths.TTFT_TABLE]
    planner += list(map(paths.search_path, config.get("searches", {})))
    real = [paths.REAL_MEASURED, paths.REAL_TABLE] if "real_measurement" in config else []
    return sorted(lab + planner + real + list(map(paths.plot_path, paths.plot_inputs(config))))


def test_report_is_one_self_contained_html_file(built, html):
    copy, done = built
    assert "Report created" in done.stdout + done.stderr
    assert "metadata" not in done.stdout + done.stderr  # every artifact has its provenance after a run
    assert html.lstrip().lower().startswith("<!doctype html") and html.rstrip().endswith("</html>")
    assert not re.search(r"<script\b[^>]*\bsrc\s*=", html), "a script loaded from elsewhere"
    assert not re.search(r"<link\b", html) and "@import" not in html, "a stylesheet loaded from elsewhere"
    results = script_variable(html, "results")
    assert results and all(entry["data_uri"].startswith("data:") for entry in results.values())
    assert sorted(path.name for path in copy.iterdir() if path.name.startswith("report")) == ["report", "report.html"]


def test_report_has_every_report_artifact_with_its_caption(html):
    """Every artifact the config marks for the report has its rendered caption; those of the lab's own artifacts
    say their finding (an artifact a user adds gets its kind's caption)."""
    results = script_variable(html, "results")
    config = load_config()
    assert sorted(results) == report_artifacts(config)
    for path, entry in results.items():
        caption = entry["caption"]
        assert caption.strip() and "{{" not in caption and "{%" not in caption, path  # the Jinja was rendered
        if path in CAPTIONS:
            assert CAPTIONS[path] in caption, (path, caption)
    for plan in config["plans"]:  # with the job's own wildcards
        assert f">{plan}</tt>" in results[f"results/plan/{plan}.json"]["caption"]


def test_report_embeds_the_committed_figures(html):
    results = script_variable(html, "results")
    categories = script_variable(html, "categories")
    figures = [paths.plot_path(name) for name in sorted(paths.plot_inputs(load_config()))]
    assert sorted(path for paths in categories["Figures"].values() for path in paths) == figures
    for path in figures:
        entry = results[path]
        assert entry["labels"] == {"figure": Path(path).stem}
        assert entry["mime_type"] == "image/png"
        data = base64.b64decode(entry["data_uri"].split("base64,", 1)[1])
        assert data == (ROOT / path).read_bytes(), path


def test_report_text_names_the_findings_and_the_six_plots(html):
    for sentence in ("Finding 1", "The policy answer", "planner's answer", "synthetic example"):
        assert sentence in html, sentence
    for name in ("gpu_cliff", "cpu_cliff", "mrc", "ttft_per_pass", "predicted_vs_measured", "ttft_budgets"):
        assert f"{name}.png" in html, name
    description = script_variable(html, "workflow-desc")  # report/workflow.rst: the findings first
    assert description.index("What the lab shows") < description.index("kvlab regenerates every artifact")


# --- The captions, rendered as Snakemake renders them (without a run) -------------------------------------------

# caption file, rule, wildcards: each job whose output is marked for the report with that caption (rules/*.smk)
SYNTHETIC_JOBS = [
    ("measured.rst", "measured", {}),
    ("predicted_vs_measured_table.rst", "ttft_fit", {}),
    *(("plot.rst", "plot", {"plot": name}) for name in commands.MEASURED_PLOTS),
]
REAL_JOBS = [
    ("measured.rst", "real_measured", {}),
    ("predicted_vs_measured_table.rst", "real_ttft_fit", {}),
    *(("plot.rst", "plot", {"plot": name}) for name in commands.REAL_PLOTS),
]


def caption(name, rule, wildcards, config=None):
    """report/NAME rendered for a job of ``rule`` with ``wildcards``, as `snakemake --report` renders it (a name
    the caption uses that the job lacks is an error here)."""
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    job = SimpleNamespace(rule=rule, wildcards=SimpleNamespace(**wildcards), config=config or load_config())
    text = environment.from_string((ROOT / "report" / name).read_text(encoding="utf-8")).render(snakemake=job)
    return " ".join(text.split())


def claims(text):
    """The words of a caption, its literals (``...``: file and config names) left out."""
    return re.sub(r"``[^`]*``", "", text)


@pytest.mark.parametrize(("name", "rule", "wildcards"), SYNTHETIC_JOBS, ids=[str(job) for job in SYNTHETIC_JOBS])
def test_a_caption_over_the_synthetic_example_says_so_and_claims_no_measurement(name, rule, wildcards):
    text = caption(name, rule, wildcards)
    assert "synthetic example" in text, text
    assert not re.search(r"measur", claims(text), flags=re.IGNORECASE), text


@pytest.mark.parametrize(("name", "rule", "wildcards"), REAL_JOBS, ids=[str(job) for job in REAL_JOBS])
def test_a_caption_of_the_real_server_calls_its_cache_the_ram_cache(name, rule, wildcards):
    text = caption(name, rule, wildcards)
    assert "RAM cache" in text and "LlamaRAMCache" in text and "synthetic" not in text, text


def test_a_configured_measurement_is_not_called_synthetic():
    config = load_config()
    config["measurement"]["source"] = "/opt/fixtures/kvoffload/ttft.jsonl"
    for name, rule in (("measured.rst", "measured"), ("predicted_vs_measured_table.rst", "ttft_fit")):
        text = caption(name, rule, {}, config)
        assert "synthetic" not in text and "/opt/fixtures/kvoffload/ttft.jsonl" in text, text


def test_every_plot_has_a_caption_of_its_own():
    for name in plots.PLOTS:
        text = caption("plot.rst", "plot", {"plot": name})
        assert text and not text.startswith("The figure "), name
    assert caption("plot.rst", "plot", {"plot": "heatmap"}) == "The figure ``heatmap``."


def test_the_reports_first_page_says_which_numbers_are_the_synthetic_examples():
    """report/workflow.rst: the sentence that quotes the 12x speed-up says it is the synthetic example's."""
    text = " ".join((ROOT / "report" / "workflow.rst").read_text(encoding="utf-8").split())
    (sentence,) = [sentence for sentence in re.split(r"(?<=\.) ", text) if "12x" in sentence]
    assert "synthetic example" in sentence, sentence
    assert "LlamaRAMCache" in text and "trace_reuse.png" in text


def test_report_html_is_a_build_product_ignored_by_git():
    assert subprocess.run(["git", "check-ignore", "-q", "report.html"], cwd=ROOT).returncode == 0
    tracked = subprocess.run(["git", "ls-files", "report.html"], cwd=ROOT, capture_output=True, text=True)
    assert tracked.stdout == ""


def test_make_report_runs_snakemake_report():
    done = subprocess.run(["make", "-n", "report"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert ".venv/bin/snakemake --report report.html" in done.stdout.splitlines()
    assert done.stdout.index("kvlab run") < done.stdout.index("--report")  # the run first: provenance
