"""kvlab serve's page (issue 41), through Flask's test client: it answers the lab's capacity question with kvlab.plan's
numbers, its command line is that question (run, it prints the same plans), its link refills the form, bad input gets
the API's one line beside its field, uploads are bounded and kept in the page's folder, a path is never read from a
form value, and a running question can be cancelled. make test-browser drives the same page in headless Chromium."""

import html
import json
import re
import shlex
import time

import pytest
from conftest import ROOT, kvlab

from kvlab import api
from kvlab.web.app import make_app

QWEN = "Qwen2.5-1.5B-Instruct"
LAB = {
    "model": QWEN,
    "workload": "lab",
    "gpu_tokens": "21520",
    "cpu_gib": "0,1.5",
    "engine": "vllm",
    "gpu_system": "h100_sxm",
    "latency_source": "roofline",
    "prices": "default",
}
KEYWORDS = {
    "workload": "lab",
    "model_config": f"models/{QWEN}/config.json",
    "gpu_tokens": 21520,
    "cpu_gib": ["0", "1.5"],
    "engine": "vllm",
    "gpu_system": "h100_sxm",
    "latency_source": "roofline",
    "prices": "default",
}


@pytest.fixture
def client(tmp_path):
    app = make_app(ROOT / "models", tmp_path, max_upload=64 * 1024)
    app.folder = tmp_path
    with app.test_client() as client:
        client.application = app
        yield client


def asked(client, data, files=None):
    """The page the question ends on (polled until the job is done)."""
    sent = client.post("/ask", data={**data, **(files or {})}, content_type="multipart/form-data")
    if sent.status_code != 303:
        return sent.data.decode()
    location = sent.headers["Location"]
    for _ in range(600):
        page = client.get(location).data.decode()
        if "Working on it" not in page:
            return page
        time.sleep(0.1)
    raise AssertionError("the question did not finish")


def cells(page):
    table = re.search(r'<table id="answer">(.*?)</table>', page, re.S).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]
    return [[html.unescape(cell) for cell in re.findall(r"<td>(.*?)</td>", row, re.S)] for row in rows]


def test_the_lab_question_is_answered_with_the_apis_numbers(client):
    page = asked(client, LAB)
    plans = [point.to_dict() for point in api.plan(**KEYWORDS)]
    shown = cells(page)
    assert len(shown) == len(plans) == 2
    for row, plan in zip(shown, plans, strict=True):
        assert row[0] == str(plan["cache"]["cpu_gib"])
        assert row[1] == str(plan["token_hit_ratio"])
        assert row[2:4] == [str(plan["ttft"]["all"]["p50_ms"]), str(plan["ttft"]["all"]["p99_ms"])]
        assert row[7] == str(plan["cost"]["per_hour"]["total"])
        assert row[8] == plan["verdict"]["line"]
    assert page.count("<svg") == 1 and "GPU tier" in page and "CPU tier at the GPU room" in page
    settings = html.unescape(re.search(r'<pre id="settings">(.*?)</pre>', page, re.S).group(1))
    assert "--kv-offloading-size 0" in settings


def test_its_command_line_is_the_same_question(client):
    page = asked(client, LAB)
    command = html.unescape(re.search(r'<pre id="command">(.*?)</pre>', page, re.S).group(1))
    words = shlex.split(command)
    assert words[:2] == ["kvlab", "plan"]
    done = kvlab(*words[1:], cwd=ROOT)
    assert done.returncode == 0
    model = words[words.index("--model-config") + 1]  # the page's models folder, as it was given
    assert json.loads(done.stdout) == [point.to_dict() for point in api.plan(**{**KEYWORDS, "model_config": model})]


def test_its_link_refills_the_form(client):
    page = asked(client, LAB)
    link = html.unescape(re.search(r'<a id="link" href="(.*?)"', page).group(1))
    form = client.get(link).data.decode()
    assert f'<option value="{QWEN}" selected>' in form
    assert 'id="cpu_gib" value="0,1.5"' in form and 'id="gpu_tokens" value="21520"' in form
    assert '<option value="h100_sxm" selected>' in form


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"cpu_gib": "abc"}, "cpu_gib", "argument --cpu-gib: "),
        ({"tp": "0"}, "tp", "argument --tp: "),
        ({"model": "../../etc/passwd"}, "model", "choose a model, or upload its config.json"),
        ({"workload": "mooncake"}, "trace", "--workload mooncake reads a trace: upload one"),
        (
            {"prices": "/etc/passwd"},
            "prices",
            "argument --prices: the page prices with kvlab's shipped list prices only",
        ),
    ],
)
def test_bad_input_gets_its_line_beside_its_field(client, change, field, words):
    page = asked(client, {**LAB, **change})
    said = re.search(rf'<span class="error" id="error-{field}">(.*?)</span>', page, re.S)
    assert said and html.unescape(said.group(1)).startswith(words), page[-3000:]
    if field in ("cpu_gib", "tp"):  # the API's own line
        keywords = {**KEYWORDS, field: change[field]}
        with pytest.raises(api.SettingError) as raised:
            api.plan(**keywords)
        assert html.unescape(said.group(1)) == str(raised.value)


def test_a_bad_trace_gets_the_readers_line_and_stays_in_the_pages_folder(client):
    import io

    garbage = (io.BytesIO(b"this is not a trace\n"), "evil.jsonl")
    page = asked(client, {**LAB, "workload": "mooncake"}, {"trace_upload": garbage})
    said = re.search(r'<span class="error" id="error-trace">(.*?)</span>', page, re.S)
    assert said is not None and html.unescape(said.group(1)).startswith("the uploaded trace:1: ")
    assert str(client.application.folder) not in page
    kept = [path for path in client.application.folder.rglob("*") if path.is_file()]
    assert [path.name for path in kept] == ["trace"]  # a name the page made, in its folder


def test_an_upload_past_the_bound_is_refused(client):
    import io

    big = (io.BytesIO(b"x" * (65 * 1024)), "config.json")
    sent = client.post("/ask", data={**LAB, "model_upload": big}, content_type="multipart/form-data")
    assert sent.status_code == 413 and b"The request is too large: uploads up to" in sent.data


def test_a_running_question_can_be_cancelled(client):
    big = {**LAB, "workload": "long_doc_qa", "num_documents": "4000", "document_length": "20000", "cpu_gib": "1"}
    sent = client.post("/ask", data=big, content_type="multipart/form-data")
    location = sent.headers["Location"]
    assert "Working on it" in client.get(location).data.decode()
    client.post(location + "/cancel")
    assert "Cancelled." in client.get(location).data.decode()
    job = client.application.jobs[location.rsplit("/", 1)[1]]
    assert not job.process.is_alive()


def test_the_search_page_answers_with_the_apis_search(client, tmp_path):
    data = {
        "model": "Llama-3.1-8B-Instruct",
        "workload": "multi_round_qa",
        "num_users": "10",
        "num_rounds": "4",
        "time": "60",
        "slo": "ttft_p99<=1500ms,tpot_p99<=20ms",
        "gpu_system": "h100_sxm,h200_sxm",
        "cpu_gib": "0,4",
        "load": "rate=8",
        "latency_source": "roofline",
    }
    sent = client.post("/ask-search", data=data, content_type="multipart/form-data")
    location = sent.headers["Location"]
    for _ in range(600):
        page = client.get(location).data.decode()
        if "Working on it" not in page:
            break
        time.sleep(0.1)
    keywords = {
        "workload": "multi_round_qa",
        "num_users": 10,
        "num_rounds": 4,
        "time": 60,
        "rate": 8,
        "model_config": str(ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json"),
        "slo": data["slo"],
        "gpu_system": data["gpu_system"],
        "cpu_gib": data["cpu_gib"],
        "latency_source": "roofline",
        "evaluations": str(tmp_path / "evaluations"),
    }
    found = api.search(**keywords).to_dict()
    from kvlab.api.searches import label

    winner = html.unescape(re.search(r'<p id="winner">(.*?)</p>', page, re.S).group(1))
    assert (
        winner
        == f"winner: {label(found['winner']['configuration'])}: {found['winner']['cost_per_hour']:g} USD per hour"
    )
    verdict = html.unescape(re.search(r'<p id="verdict">(.*?)</p>', page, re.S).group(1))
    assert verdict == f"offloading helps? {found['verdict']['line']}"
    command = shlex.split(html.unescape(re.search(r'<pre id="command">(.*?)</pre>', page, re.S).group(1)))
    assert command[:2] == ["kvlab", "search"] and "--slo" in command and "--rate" in command
    assert "--evaluations" not in command and str(client.application.folder) not in page


def test_a_kill_stops_the_page_and_removes_its_folder(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    server = subprocess.Popen(
        [sys.executable, "-m", "kvlab", "serve", "--port", "0", "--models", str(ROOT / "models")],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert "the page is at http://127.0.0.1:" in server.stderr.readline()
    assert [path.name[:12] for path in tmp_path.iterdir()] == ["kvlab-serve-"]
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0
    assert list(tmp_path.iterdir()) == []
