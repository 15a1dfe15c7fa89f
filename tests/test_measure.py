"""`kvlab measure` against a fake OpenAI-compatible server on 127.0.0.1 (a thread of this process, speaking HTTP and
server-sent events like vLLM, llama.cpp and llama-cpp-python): the records, their order and schema, exact document
lengths by the server's own count under each tokenize endpoint, other configs kept, one line and no file for every
failure, and an API key taken from the environment that never shows. The real server: `make test-server`."""

import json
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import kvlab
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.measure.documents import documents, question

STYLES = {  # tokenize endpoint: (path, the field holding the text)
    "vllm": ("/tokenize", "prompt"),
    "llama.cpp": ("/tokenize", "content"),
    "llama-cpp-python": ("/extras/tokenize", "input"),
}


def pieces(text):
    """The fake tokenizer: a word of three letters is one or two tokens (by its checksum), anything else one."""
    ids = []
    for word in text.split():
        count = 1 + zlib.crc32(word.encode()) % 2 if len(word) == 3 else 1
        ids += [zlib.crc32(f"{word}/{part}".encode()) for part in range(count)]
    return ids


class Fake(ThreadingHTTPServer):
    """The server: ``style`` of tokenize endpoint (None: none), ``failure`` of completions, ``key`` it requires."""

    daemon_threads = True

    def __init__(self, style="vllm", failure=None, key=None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.style, self.failure, self.key = style, failure, key
        self.prompts = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def handle_error(self, request, client_address):
        pass  # a client that hangs up early (as kvlab measure does on a bad chunk) is no error of the test's

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        fake = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if fake.key and self.headers.get("Authorization") != f"Bearer {fake.key}":
            return self.reply(401, {"error": "bad key"})
        if self.path == "/v1/completions":
            return self.complete(fake, body)
        if fake.style and (self.path, STYLES[fake.style][1]) == STYLES[fake.style] and STYLES[fake.style][1] in body:
            return self.reply(200, {"tokens": pieces(body[STYLES[fake.style][1]])})
        if fake.style == "llama.cpp" and self.path == "/tokenize":
            return self.reply(200, {"tokens": []})  # llama.cpp's answer to a body without "content"
        return self.reply(404, {"error": "not found"})

    def complete(self, fake, body):
        assert body["stream"] is True
        fake.prompts.append(body["prompt"])
        if fake.failure == "status":
            return self.reply(500, {"error": "boom"})
        if fake.failure == "slow":
            time.sleep(1.0)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = [{"choices": [{"text": f" t{index}", "index": 0}]} for index in range(body["max_tokens"])]
        lines = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
        if fake.failure == "chunk":
            lines[0] = "data: {not json\n\n"
        if fake.failure != "unfinished":
            lines.append("data: [DONE]\n\n")
        for line in lines:
            self.wfile.write(line.encode())
            self.wfile.flush()


def measure(fake, out, *extra, docs=3, tokens=40):
    return kvlab(
        "measure", "--base-url", fake.url, "--model", "m", "--docs", docs, "--tokens", tokens,
        "--config-name", "lmcache", "--out", out, *extra,
    )  # fmt: skip


@pytest.mark.parametrize("style", [*STYLES, None])
def test_one_record_per_request_in_the_labs_order_with_exact_documents(tmp_path, style):
    fake = Fake(style)
    out = tmp_path / "m.jsonl"
    done = measure(fake, out, docs=3, tokens=40)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    order = [("pass1-cold", d) for d in range(3)] + [("pass2-replay", d) for d in range(3)]
    order += [("pass3-reverse", d) for d in (2, 1, 0)]
    assert [(record["pass"], record["doc"]) for record in records] == order
    assert all(list(record) == ["config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms"] for record in records)
    assert all(0 <= record["ttft_ms"] <= record["total_ms"] and record["config"] == "lmcache" for record in records)
    assert all(record["doc_tokens"] == 40 for record in records)
    texts = {}
    for number, ((_, doc), prompt) in enumerate(zip(order, fake.prompts, strict=True)):
        text, _, asked = prompt.rpartition(" ")[0].rpartition(" ")[0], None, question(number)
        assert prompt == f"{text} {asked}"
        assert texts.setdefault(doc, text) == text  # the same document every pass
    count = pieces if style else str.split
    assert all(len(count(text)) == 40 for text in texts.values())  # exact by the server's own count
    firsts = [count(text)[0] for text in texts.values()]
    assert len(set(firsts)) == 3  # documents differ from their first token
    assert len({prompt.split()[-2] for prompt in fake.prompts}) == len(fake.prompts)  # questions differ at once
    summary = tmp_path / "summary.json"
    assert kvlab("summarize", out, summary).returncode == 0


def test_other_configs_records_are_kept_and_this_configs_replaced(tmp_path):
    out = tmp_path / "m.jsonl"
    kept = [
        {"config": "baseline", "pass": "p", "doc": d, "doc_tokens": 5, "ttft_ms": 1.5, "total_ms": 2.0} for d in (0, 1)
    ]
    old = {**kept[0], "config": "lmcache", "ttft_ms": 99.0}
    out.write_text("".join(json.dumps(record) + "\n" for record in [kept[0], old, kept[1]]))
    assert measure(Fake(), out, "--pass", "only:rev", docs=2).returncode == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records[:2] == kept
    assert [(record["config"], record["pass"], record["doc"]) for record in records[2:]] == [
        ("lmcache", "only", 1),
        ("lmcache", "only", 0),
    ]


FAILURES = {
    "status": "HTTP 500",
    "chunk": "malformed stream",
    "unfinished": "malformed stream",
    "slow": "no answer within 0.2 s",
}


@pytest.mark.parametrize("failure", [*FAILURES, "refused", "bad file"])
def test_a_failure_is_one_line_and_leaves_the_file_as_it_was(tmp_path, failure):
    out = tmp_path / "m.jsonl"
    before = '{"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 5, "ttft_ms": 1.0, "total_ms": 2.0}\n'
    out.write_text(before if failure != "bad file" else before + "{oops\n")
    fake = Fake(failure=failure if failure in FAILURES else None)
    if failure == "refused":
        fake.shutdown()
        fake.server_close()
    done = measure(fake, out, "--timeout", "0.2")
    expected = {**FAILURES, "refused": "cannot connect", "bad file": f"{out}:2: malformed JSON"}[failure]
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
    assert out.read_text() == (before if failure != "bad file" else before + "{oops\n")
    assert not list(tmp_path.glob("*.tmp*"))


def test_the_api_key_comes_from_the_environment_and_never_shows(tmp_path, monkeypatch):
    secret = "s3cret-key-1234"
    fake = Fake(key=secret)
    out = tmp_path / "m.jsonl"
    refused = measure(fake, out, "--api-key-env", "MY_KEY")
    assert refused.returncode == 1 and "HTTP 401" in refused.stderr and not out.exists()
    monkeypatch.setenv("MY_KEY", secret)
    done = measure(fake, out, "--api-key-env", "MY_KEY")
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("MY_KEY", secret + "-wrong")
    wrong = measure(fake, out, "--api-key-env", "MY_KEY")
    assert wrong.returncode == 1
    for shown in (refused, done, wrong):
        assert secret not in shown.stdout + shown.stderr
    assert secret not in out.read_text()


@pytest.mark.parametrize(
    "args",
    [["--docs", "0"], ["--tokens", "0"], ["--pass", "x:sideways"], ["--pass", "a:fwd", "--pass", "a:rev"]],
)
def test_bad_arguments_are_one_line(tmp_path, args):
    out = tmp_path / "m.jsonl"
    base = ["measure", "--base-url", "http://127.0.0.1:9", "--model", "m", "--config-name", "c", "--out", out]
    defaults = {"--docs": "2", "--tokens": "5"}
    for flag, value in defaults.items():
        if flag not in args:
            base += [flag, value]
    done = kvlab(*base, *args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and not out.exists()


class Counter:
    """A tokenizer for documents(): each word is ``weights[word]`` tokens, one-letter words one."""

    def __init__(self, weights):
        self.weights = weights

    def ids(self, text):
        return [f"{word}{part}" for word in text.split() for part in range(self.weights.get(word, 1))]

    def count(self, text):
        return len(self.ids(text))

    def first(self, text):
        return self.ids(text)[0]


@settings(max_examples=40, deadline=None)
@given(count=st.integers(1, 6), tokens=st.integers(3, 120), seed=st.integers(0, 2**16))  # an opener is <= 3 tokens
def test_documents_have_exactly_the_tokens_the_server_counts(count, tokens, seed):
    from kvlab.measure.documents import WORDS

    weights = {word: 1 + zlib.crc32(f"{seed}{word}".encode()) % 3 for word in WORDS}
    counter = Counter(weights)
    made = documents(count, tokens, counter)
    assert [counter.count(doc.text) for doc in made] == [tokens] * count
    assert all(doc.exact and doc.tokens == tokens for doc in made)
    assert len({counter.first(doc.text) for doc in made}) == count
    assert [doc.text for doc in documents(count, tokens, counter)] == [doc.text for doc in made]
    plain = documents(count, tokens)
    assert all(len(doc.text.split()) == tokens and not doc.exact for doc in plain)


def test_long_doc_qa_rounds_as_kvlabs_workload_orders_them(tmp_path):
    from kvlab.workloads import LongDocQAWorkload

    fake = Fake()
    out = tmp_path / "m.jsonl"
    assert measure(fake, out, "--long-doc-qa", "2:random:7", docs=3).returncode == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    settings = {"num_documents": 3, "document_length": 40, "repeat_count": 2, "shuffle_seed": 7}
    workload = LongDocQAWorkload(repeat_mode="random", **settings)
    expected = [(name, doc) for name, order in zip(workload.rounds, workload.orders(), strict=True) for doc in order]
    assert [(record["pass"], record["doc"]) for record in records] == expected
    assert len(expected) == 3 * 3
    both = measure(fake, out, "--long-doc-qa", "2:tile", "--pass", "a:fwd")
    assert both.returncode == 2 and "one workload at a time" in both.stderr
