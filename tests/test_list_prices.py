"""What a plan costs per hour (``kvlab plan --prices``, kvlab/latency/list_prices.py; issue 40, part 2): the cost is
the GPUs', the host memory's and the disk's prices of the file times the plan's GPUs and budgets, read here from the
file by YAML alone; a CPU budget above what a node's host memory gives each GPU is refused with the figures; and a
prices file that is not one stops in one line naming the file and its line, from the command and the API alike."""

import json

import pytest
import yaml
from conftest import ROOT, kvlab

from kvlab import api
from kvlab.latency.list_prices import DEFAULT, PricesError, load_prices
from kvlab.latency.systems import read_system

LLAMA = str(ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json")
SETTING = ["--workload", "lab", "--docs", "4", "--model-config", LLAMA, "--gpu-tokens", "10000"]
HARDWARE = ["--gpu-system", "h100_sxm", "--engine", "vllm", "--latency-source", "roofline"]
OWN = """\
currency: EUR
host_memory_gib_hour: 0.01
host_memory_source: a test's own figure
disk_tib_hour: 0.25
disk_source: a test's own figure
systems:
  h100_sxm:
    gpu_hour: 2.5
    node: {gpus: 4, host_memory_gib: 40, disk_tib: 2}
    source: a test's own node
"""


def plan(tmp_path, *args):
    (tmp_path / "prices.yaml").write_text(OWN)
    return kvlab("plan", *SETTING, *HARDWARE, *map(str, args), cwd=tmp_path)


def expected_cost(text, system, gpus, cpu_gib, disk_gib=0):
    """The cost per hour from a prices file's text, read by YAML alone."""
    data = yaml.safe_load(text)
    parts = {
        "gpus": data["systems"][system]["gpu_hour"] * gpus,
        "host_memory": data["host_memory_gib_hour"] * cpu_gib * gpus,
        "disk": data["disk_tib_hour"] * disk_gib / 1024 * gpus,
    }
    return {**{key: round(value, 4) for key, value in parts.items()}, "total": round(sum(parts.values()), 4)}


@pytest.mark.parametrize(("tp", "cpu_gib", "disk_gib"), [(1, 0, 0), (2, 7.5, 0), (4, 10, 100)])
def test_a_plan_costs_its_gpus_host_memory_and_disk(tmp_path, tp, cpu_gib, disk_gib):
    """The plan's ``cost``: per hour, the file's GPU-hour times the plan's GPUs (its TP), the GiB-hour times its
    CPU budget per GPU and the TiB-hour times its disk per GPU, each part and the total; the table says it too."""
    disk = ["--disk-gib", disk_gib] if disk_gib else []
    done = plan(tmp_path, "--tp", tp, "--cpu-gib", cpu_gib, *disk, "--prices", "prices.yaml")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    cost = json.loads(done.stdout)["cost"]
    assert cost["per_hour"] == expected_cost(OWN, "h100_sxm", tp, cpu_gib, disk_gib)
    assert (cost["gpus"], cost["currency"], cost["prices"], cost["gpu_source"]) == (
        tp,
        "EUR",
        "prices.yaml",
        "a test's own node",
    )
    table = plan(tmp_path, "--tp", tp, "--cpu-gib", cpu_gib, *disk, "--prices", "prices.yaml", "--format", "table")
    assert f"cost: {cost['per_hour']['total']:g} EUR per hour" in table.stdout


def test_the_shipped_prices_cost_each_system_they_list():
    """``--prices default``: every system the file lists is priced as its text says, its node's GPUs where the file
    gives none those of aiconfigurator-core's system, and every figure has its source."""
    text = DEFAULT.read_text(encoding="utf-8")
    data, prices = yaml.safe_load(text), load_prices("default")
    assert set(prices.systems) == set(data["systems"]) and prices.systems
    for system, given in data["systems"].items():
        assert prices.per_hour(system, 8, 16, 64) == expected_cost(text, system, 8, 16, 64)
        node = prices.system(system).node
        assert node.gpus == given["node"].get("gpus", read_system(system).gpus_per_node)
        assert node.host_memory_gib == given["node"]["host_memory_gib"]
        assert "20" in prices.system(system).source  # a dated source (a year in it)
    assert prices.host_memory_source and prices.disk_source


def test_a_cpu_budget_past_the_nodes_host_memory_is_refused_with_the_figures(tmp_path):
    """The test's node has 40 GiB of host memory for 4 GPUs: 10 GiB per GPU is taken, 10.5 is refused before any
    work, in one line with the node's figures, and nothing is printed; the API raises the same line."""
    assert plan(tmp_path, "--cpu-gib", "10", "--prices", "prices.yaml").returncode == 0
    done = plan(tmp_path, "--cpu-gib", "0,10.5", "--prices", "prices.yaml")
    line = (
        "argument --cpu-gib: 10.5 GiB per GPU of pinned host memory is more than a node of h100_sxm has: 40 GiB for"
        " 4 GPUs, 10 GiB per GPU (prices.yaml)"
    )
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"kvlab plan: error: {line}\n")
    keywords = {"workload": "lab", "docs": 4, "model_config": LLAMA, "gpu_tokens": 10000}
    hardware = {"gpu_system": "h100_sxm", "engine": "vllm", "latency_source": "roofline"}
    with pytest.raises(PricesError) as raised:
        api.plan(**keywords, **hardware, cpu_gib="10.5", prices=str(tmp_path / "prices.yaml"))
    assert str(raised.value) == line.replace("(prices.yaml)", f"({tmp_path / 'prices.yaml'})")


BAD = {
    "not YAML": ("systems: [", 1, "not valid YAML"),
    "empty": ("", None, "empty"),
    "a key of no prices file": (OWN + "discount: 0.5\n", 11, "discount: not a key of a prices file here"),
    "a negative price": (OWN.replace("gpu_hour: 2.5", "gpu_hour: -2.5"), 8, "is not a figure from 0"),
    "not a number": (OWN.replace("gpu_hour: 2.5", "gpu_hour: cheap"), 8, "not a number: 'cheap'"),
    "NaN": (OWN.replace("disk_tib_hour: 0.25", "disk_tib_hour: .nan"), 4, "is not a figure from 0"),
    "past any price": (OWN.replace("gpu_hour: 2.5", "gpu_hour: 1.0e+308"), 8, "is not a figure from 0 to 1e+09"),
    "a number YAML reads as text": (OWN.replace("gpu_hour: 2.5", "gpu_hour: 25e-1"), 8, "write 25.0e-1"),
    "no such system": (OWN.replace("  h100_sxm:", "  h900_sxm:"), 7, "h900_sxm: not a GPU system of"),
    "no GPUs": (OWN.replace("gpus: 4", "gpus: 0"), 9, "is not a figure from 1"),
    "half a GPU": (OWN.replace("gpus: 4", "gpus: 2.5"), 9, "not a whole number"),
    "no source": (OWN.replace("    source: a test's own node\n", ""), 7, "source: missing"),
    "a key twice": (OWN + "currency: USD\n", 11, "currency: the key is given twice"),
    "a list at the top": ("- 1\n- 2\n", 1, "(top level): not a mapping"),
    "nested too deeply": ("[" * 10000 + "]" * 10000, None, "nested too deeply"),
    "an integer past any float": (OWN.replace("gpu_hour: 2.5", "gpu_hour: 1" + "0" * 400), 8, "is not a figure"),
    "a terminal's escapes in a name": (OWN.replace("  h100_sxm:", '  "h100\\x1b[2J\\u202e":'), 7, "\\x1b[2J\\u202e"),
    "a Python tag": ("a: !!python/object/apply:os.system [echo]\n", 1, "not valid YAML"),
    "an alias bomb": (
        "a: &a [1,1,1,1,1,1,1,1,1,1]\n"
        + "".join(
            f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
            for p, c in zip("abcdef", "bcdefg", strict=True)
        ),
        None,
        "aliases expand",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_prices_file_stops_in_one_line_naming_its_line(tmp_path, case):
    text, line, says = BAD[case]
    (tmp_path / "bad.yaml").write_text(text)
    done = kvlab("plan", *SETTING, *HARDWARE, "--prices", "bad.yaml", cwd=tmp_path)
    where = "bad.yaml" if line is None else f"bad.yaml:{line}"
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.startswith("kvlab plan: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert where in done.stderr and says in done.stderr, done.stderr
    assert not any(mark in done.stderr for mark in ("\x1b", "\u202e", "\r")), done.stderr  # printable as it is
    with pytest.raises(PricesError) as raised:  # the API's error is the same line
        load_prices(tmp_path / "bad.yaml")
    assert str(raised.value) == done.stderr.removeprefix("kvlab plan: error: ").rstrip("\n").replace(
        "bad.yaml", str(tmp_path / "bad.yaml"), 1
    )


def test_a_source_is_printed_as_it_reads(tmp_path):
    """A source text with a terminal's escape sequence in it is shown escaped in the table, never sent raw."""
    (tmp_path / "prices.yaml").write_text(OWN.replace("source: a test's own node", 'source: "red \\x1b[31m node"'))
    done = kvlab("plan", *SETTING, *HARDWARE, "--prices", "prices.yaml", "--format", "table", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "GPU: red \\x1b[31m node" in done.stdout and "\x1b" not in done.stdout


def test_an_empty_name_is_no_prices_file(tmp_path):
    done = kvlab("plan", *SETTING, *HARDWARE, "--prices", "", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "kvlab plan: error: argument --prices: an empty name: give a prices file, or default\n"


def test_prices_need_a_gpu_system(tmp_path):
    (tmp_path / "prices.yaml").write_text(OWN)
    done = kvlab("plan", *SETTING, "--prices", "prices.yaml", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "kvlab plan: error: argument --prices: prices the GPUs of a --gpu-system: give --gpu-system\n"
