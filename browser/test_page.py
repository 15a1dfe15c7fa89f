"""kvlab serve's page in a real browser (make test-browser; issue 41): headless Chromium, driven by Selenium through
Debian's chromedriver, fills the form for the lab's capacity question and for the conversation trace (uploaded),
and reads the answer: every figure is kvlab.plan's. A bad trace gets its one line beside the field. Each question's
time to answer and a screenshot of each page go to work/browser/."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "work" / "browser"
TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
QUESTIONS = {
    "lab": {
        "model": "Qwen2.5-1.5B-Instruct",
        "fields": {"gpu_tokens": "21520", "cpu_gib": "0,1.5"},
        "keywords": {"workload": "lab", "gpu_tokens": 21520, "cpu_gib": ["0", "1.5"]},
    },
    "conversation": {
        "model": "Llama-3.1-8B-Instruct",
        "workload": "mooncake",
        "trace": TRACE,
        "fields": {"gpu_tokens": "1000000", "cpu_gib": "0,64"},
        "keywords": {"workload": "mooncake", "trace": str(TRACE), "gpu_tokens": 1000000, "cpu_gib": ["0", "64"]},
    },
}
PRICED = {"engine": "vllm", "gpu_system": "h100_sxm", "latency_source": "roofline", "prices": "default"}


@pytest.fixture(scope="module")
def page_url():
    """``kvlab serve`` on a free port of 127.0.0.1, as a user starts it."""
    command = [sys.executable, "-m", "kvlab", "serve", "--port", "0", "--models", str(ROOT / "models")]
    server = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    line = server.stderr.readline()
    found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
    assert found, line
    yield found.group(1)
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,2400",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    yield driver
    driver.quit()


def fill(browser, url, question, bad_trace=None):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(url)
    Select(browser.find_element(By.NAME, "model")).select_by_value(question["model"])
    Select(browser.find_element(By.NAME, "workload")).select_by_value(question.get("workload", "lab"))
    for name, value in {**question["fields"], "engine": "vllm", "gpu_system": "h100_sxm"}.items():
        element = browser.find_element(By.NAME, name)
        if element.tag_name == "select":
            Select(element).select_by_value(value)
        else:
            element.clear()
            element.send_keys(value)
    Select(browser.find_element(By.NAME, "latency_source")).select_by_value("roofline")
    Select(browser.find_element(By.NAME, "prices")).select_by_value("default")
    trace = bad_trace or question.get("trace")
    if trace is not None:
        browser.find_element(By.NAME, "trace_upload").send_keys(str(trace))
    started = time.monotonic()
    browser.find_element(By.XPATH, "//form[@action='/ask']//button").click()
    for _ in range(2400):  # the answer, or a line beside a field
        source = browser.page_source
        if 'id="answer"' in source or 'class="error"' in source:
            break
        time.sleep(0.25)
    return time.monotonic() - started


def shown_rows(browser):
    from selenium.webdriver.common.by import By

    rows = browser.find_elements(By.CSS_SELECTOR, "#answer tr")[1:]
    return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")] for row in rows]


@pytest.mark.parametrize("name", list(QUESTIONS))
def test_the_page_answers_with_the_plans_numbers(browser, page_url, name):
    from kvlab import api

    question = QUESTIONS[name]
    seconds = fill(browser, page_url, question)
    OUT.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(OUT / f"{name}.png"))
    model = str(ROOT / "models" / question["model"] / "config.json")
    plans = [point.to_dict() for point in api.plan(**question["keywords"], model_config=model, **PRICED)]
    rows = shown_rows(browser)
    assert len(rows) == len(plans), browser.page_source[-2000:]
    for row, plan in zip(rows, plans, strict=True):
        expected = [plan["cache"]["cpu_gib"], plan["token_hit_ratio"], plan["ttft"]["all"]["p50_ms"]]
        expected += [plan["ttft"]["all"]["p99_ms"]]
        assert row[:4] == [str(value) for value in expected]
        assert row[7] == str(plan["cost"]["per_hour"]["total"]) and row[8] == plan["verdict"]["line"]
    (OUT / f"{name}.json").write_text(json.dumps({"seconds_to_answer": round(seconds, 1)}) + "\n")
    print(f"{name}: answered in {seconds:.1f} s")


def test_a_bad_trace_gets_its_line_beside_the_field(browser, page_url, tmp_path):
    from selenium.webdriver.common.by import By

    bad = tmp_path / "bad.jsonl"
    bad.write_text("not a trace\n", encoding="utf-8")
    fill(browser, page_url, {**QUESTIONS["conversation"], "trace": None}, bad_trace=bad)
    said = browser.find_element(By.ID, "error-trace").text
    assert said.startswith("the uploaded trace:1: ")
    browser.save_screenshot(str(OUT / "bad_trace.png"))


def test_the_search_page_answers_with_the_searchs_winner(browser, page_url, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from kvlab import api
    from kvlab.api.searches import label

    browser.get(page_url + "search")
    Select(browser.find_element(By.NAME, "model")).select_by_value("Llama-3.1-8B-Instruct")
    Select(browser.find_element(By.NAME, "workload")).select_by_value("multi_round_qa")
    fields = {"num_users": "10", "num_rounds": "4", "time": "60", "slo": "ttft_p99<=1500ms,tpot_p99<=20ms"}
    fields |= {"gpu_system": "h100_sxm,h200_sxm", "cpu_gib": "0,4", "load": "rate=8"}
    for name, value in fields.items():
        element = browser.find_element(By.NAME, name)
        element.clear()
        element.send_keys(value)
    Select(browser.find_element(By.NAME, "latency_source")).select_by_value("roofline")
    started = time.monotonic()
    browser.find_element(By.XPATH, "//form[@action='/ask-search']//button").click()
    for _ in range(2400):
        if 'id="winner"' in browser.page_source or 'class="error"' in browser.page_source:
            break
        time.sleep(0.25)
    seconds = time.monotonic() - started
    browser.save_screenshot(str(OUT / "search.png"))
    found = api.search(
        workload="multi_round_qa",
        num_users=10,
        num_rounds=4,
        time=60,
        rate=8,
        latency_source="roofline",
        model_config=str(ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json"),
        slo=fields["slo"],
        gpu_system=fields["gpu_system"],
        cpu_gib=fields["cpu_gib"],
        evaluations=str(tmp_path),
    ).to_dict()
    winner = found["winner"]
    expected = f"winner: {label(winner['configuration'])}: {winner['cost_per_hour']:g} USD per hour"
    assert browser.find_element(By.ID, "winner").text == expected
    (OUT / "search.json").write_text(json.dumps({"seconds_to_answer": round(seconds, 1)}) + "\n")
    print(f"search: answered in {seconds:.1f} s")
