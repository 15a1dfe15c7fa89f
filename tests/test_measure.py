"""`kvlab measure` against a fake OpenAI-compatible server on 127.0.0.1 (a thread of this process, speaking HTTP and
server-sent events like vLLM, llama.cpp and llama-cpp-python): the records, their order and schema, exact document
lengths by the server's own count under each tokenize endpoint, other configs kept, one line and no file for every
failure, every request bounded in total by --timeout however the server trickles, bad base URLs refused as usage
errors, and credentials (an API key taken from the environment, a password in the URL) that never show, even when
the server echoes them back. The real server: `make test-server`."""

import base64
import json
import subprocess
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import kvlab, run_python
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
    """The server: ``style`` of tokenize endpoint (None: none), ``failure`` of completions (or of tokenize), ``key``
    it requires, ``echo``: where it sends the request's Authorization header back (as a server might)."""

    daemon_threads = True

    def __init__(self, style="vllm", failure=None, key=None, echo=None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.style, self.failure, self.key, self.echo = style, failure, key, echo
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

    def trickle(self, piece, headers):
        """An answer that never ends: ``piece`` every 0.05 s, until the client hangs up (the write fails)."""
        self.send_response(200)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        while True:
            self.wfile.write(piece)
            self.wfile.flush()
            time.sleep(0.05)

    def do_POST(self):
        fake = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        echoed = self.headers.get("Authorization", "")
        if fake.key and echoed != f"Bearer {fake.key}":
            return self.reply(401, {"error": "bad key"})
        if fake.echo == "status":
            self.send_response(500, echoed)  # in the reason phrase and the body
            self.send_header("Content-Length", str(len(echoed)))
            self.end_headers()
            return self.wfile.write(echoed.encode())
        if self.path == "/v1/completions":
            return self.complete(fake, body)
        if fake.failure == "long answer":
            return self.reply(200, {"tokens": list(range(5000))})
        if fake.failure == "tokenize trickle":
            return self.trickle(b" ", {"Content-Type": "application/json", "Content-Length": "1000000"})
        if fake.style and (self.path, STYLES[fake.style][1]) == STYLES[fake.style] and STYLES[fake.style][1] in body:
            tokens = pieces(body[STYLES[fake.style][1]])
            return self.reply(200, {"tokens": [echoed, *tokens[1:]] if fake.echo == "token" else tokens})
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
        if fake.failure in ("comments", "bytes"):  # an SSE comment line, or one byte without a line end
            return self.trickle(
                b": ping\n\n" if fake.failure == "comments" else b"d", {"Content-Type": "text/event-stream"}
            )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = [{"choices": [{"text": f" t{index}", "index": 0}]} for index in range(body["max_tokens"])]
        lines = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
        if fake.failure == "chunk":
            lines[0] = "data: {not json\n\n"
        if fake.failure == "long line":
            lines[0] = "data: " + " " * 5000 + "\n\n"
        if fake.echo == "stream":
            lines[0] = f"data: {self.headers.get('Authorization', '')}\n\n"
        if fake.failure != "unfinished":
            lines.append("data: [DONE]\n\n")
        for line in lines:
            self.wfile.write(line.encode())
            self.wfile.flush()


def measure(fake, out, *extra, docs=3, tokens=40, url=None):
    return kvlab(
        "measure", "--base-url", url or fake.url, "--model", "m", "--docs", docs, "--tokens", tokens,
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
    "slow": "took longer than 0.2 s (--timeout)",
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


SECRET = "s3cret-Key-0042"


@pytest.mark.parametrize("echo", [None, "token", "stream", "status"])
@pytest.mark.parametrize("credential", ["key", "password"])
def test_credentials_never_show_even_when_the_server_echoes_them(tmp_path, monkeypatch, credential, echo):
    """The key (from --api-key-env) or the password of --base-url, sent by kvlab, echoed back by the server as a
    token, a stream's chunk or an HTTP error's reason and body: nowhere in stdout, stderr or the file."""
    out = tmp_path / "m.jsonl"
    if credential == "key":
        fake = Fake(key=SECRET, echo=echo)
        monkeypatch.setenv("MY_KEY", SECRET)
        done = measure(fake, out, "--api-key-env", "MY_KEY")
    else:
        fake = Fake(echo=echo)
        done = measure(fake, out, url=fake.url.replace("http://", f"http://user:{SECRET}@"))
    basic = base64.b64encode(f"user:{SECRET}".encode()).decode()  # the password as the Basic header carries it
    shown = done.stdout + done.stderr + (out.read_text() if out.exists() else "")
    assert SECRET not in shown and basic not in shown, shown
    if echo is None:
        assert done.returncode == 0 and done.stderr == "", done.stderr
    else:
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and not out.exists(), done.stderr
        if credential == "password":
            assert "//***@127.0.0.1:" in done.stderr  # the URL is named, its user information masked


def test_a_repeated_first_token_is_named_by_position_never_by_value():
    """The first tokens are the server's: the message names the documents that share one, not the token."""

    class Echo:
        def count(self, text):
            return len(text.split())

        def first(self, text):
            return f"Bearer {SECRET}"

    with pytest.raises(ValueError, match="^document 1 starts with the same token as document 0$") as raised:
        documents(2, 5, Echo())
    assert SECRET not in str(raised.value)


@pytest.mark.parametrize("failure", ["comments", "bytes", "tokenize trickle"])
def test_the_timeout_bounds_each_requests_total_time_however_the_server_trickles(tmp_path, failure):
    """A server that never ends its answer but keeps sending (an SSE comment, a byte without a line end, a tokenize
    body byte by byte) every 0.05 s: the run fails, one line naming the URL and --timeout, no file. In a
    subprocess, whose deadline is a guard against a hang (without the bound the run would go on forever)."""
    fake = Fake(failure=failure)
    out = tmp_path / "m.jsonl"
    arguments = ["measure", "--base-url", fake.url, "--model", "m", "--docs", "2", "--tokens", "5"]
    arguments += ["--config-name", "c", "--out", out, "--timeout", "0.3"]
    try:
        done = run_python("-m", "kvlab", *arguments, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("kvlab measure --timeout 0.3 still running after 60 s")
    path = "/tokenize" if failure == "tokenize trickle" else "/v1/completions"
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"kvlab measure: error: {fake.url}{path}: ")
    assert "took longer than 0.3 s (--timeout)" in done.stderr
    assert not out.exists() and not list(tmp_path.glob("*.tmp*"))


@pytest.mark.parametrize("failure", ["long line", "long answer"])
def test_an_answer_too_large_is_refused_before_it_fills_the_memory(tmp_path, monkeypatch, failure):
    """A stream's line, or a tokenize answer, over the client's limit (made small here): one line, no file."""
    from kvlab.measure import client

    monkeypatch.setattr(client, "LARGEST", 4096)
    out = tmp_path / "m.jsonl"
    done = measure(Fake(failure=failure), out)
    expected = "a line over 4,096 bytes" if failure == "long line" else "the answer is over 4,096 bytes"
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
    assert not out.exists()


BAD_URLS = [
    "http://[::1",  # an unbalanced IPv6 bracket
    "http://::1]",
    "http://[::1]x",
    "http://[zz]:80",  # a bracket holding no IPv6 address
    "ftp://127.0.0.1:9",  # a bad scheme
    "127.0.0.1:8000",  # no scheme
    "http://",  # no host
    "http://:80",
    "http:///v1",
    "http://127.0.0.1:99999",  # bad ports
    "http://127.0.0.1:abc",
    "http://127.0.0.1:0",
    "http://127.0.0.1:-1",
    "http://local host:9",  # spaces and control characters
    " http://127.0.0.1:9",
    "http://127.0.0.1:9\n",
    "http://127.0.0.1:9/?x=1",  # a query or a fragment
    "http://127.0.0.1:9/#top",
]


@pytest.mark.parametrize(
    "args",
    [["--docs", "0"], ["--tokens", "0"], ["--pass", "x:sideways"], ["--pass", "a:fwd", "--pass", "a:rev"]]
    + [pytest.param(["--base-url", url], id=f"base-url={url!r}") for url in BAD_URLS],
)
def test_bad_arguments_are_one_line(tmp_path, args):
    out = tmp_path / "m.jsonl"
    base = ["measure", "--model", "m", "--config-name", "c", "--out", out]
    defaults = {"--docs": "2", "--tokens": "5", "--base-url": "http://127.0.0.1:9"}
    for flag, value in defaults.items():
        if flag not in args:
            base += [flag, value]
    done = kvlab(*base, *args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and not out.exists(), done.stderr
    assert done.stderr.startswith("kvlab measure: error: ")
    if "--base-url" in args:
        assert "argument --base-url: expected http://HOST[:PORT][/PATH]" in done.stderr, done.stderr


@pytest.mark.parametrize("url", ["http://user:pw-0042@[::1", "http://user:pw-0042@h:abc", "http://user:pw/0042@h"])
def test_a_bad_base_url_is_shown_without_its_password(tmp_path, url):
    out = tmp_path / "m.jsonl"
    done = kvlab(
        "measure", "--base-url", url, "--model", "m", "--docs", 1, "--tokens", 5, "--config-name", "c", "--out", out
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "//***@" in done.stderr, done.stderr
    assert "0042" not in done.stderr


def test_an_api_key_a_header_cannot_carry_is_a_usage_error(tmp_path, monkeypatch):
    out = tmp_path / "m.jsonl"
    monkeypatch.setenv("MY_KEY", SECRET + "\n")
    done = measure(Fake(key=SECRET), out, "--api-key-env", "MY_KEY")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "an HTTP header cannot carry" in done.stderr
    assert SECRET not in done.stderr and not out.exists()


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
