"""An OpenAI-compatible server, as the measurement needs it: count tokens, and time a streamed completion.

Token counts come from the first of the servers' own endpoints that answers: vLLM's and SGLang's ``/tokenize``
(``{"model", "prompt"}``), llama.cpp's ``/tokenize`` (``{"content"}``) and llama-cpp-python's
``/extras/tokenize`` (``{"input"}``); each answers ``{"tokens": [...]}``. A completion is ``POST
/v1/completions`` with ``stream: true``: its TTFT is the time from sending the request to the first streamed
chunk (its first token), its total the time to the stream's end (``data: [DONE]``).

Every request, start to end, is bounded by the timeout: httpx's timeout bounds each read, not the whole, so a
server that trickles bytes (an SSE comment every second, or one byte at a time) would keep a request going
forever; the body is read chunk by chunk against a deadline instead.

Every failure is a :class:`ServerError` whose message is one line naming the URL and what went wrong. A message
never shows what the server sent (a server may echo the request's headers) and is formed in one place,
:meth:`Server.error`, which also blanks out the credentials (the API key, the password of the URL) wherever they
appear; the URL is shown with its password (and a mistyped one's query values and fragment) replaced by ``***``.
"""

import base64
import contextlib
import json
import re
import time
import urllib.parse

from kvlab.util.files import shown

__all__ = ["Server", "ServerError", "base_url", "masked"]

TOKENIZERS = (  # (path, the body for a text)
    ("/tokenize", lambda model, text: {"model": model, "prompt": text, "add_special_tokens": False}),
    ("/tokenize", lambda model, text: {"content": text, "add_special": False}),
    ("/extras/tokenize", lambda model, text: {"input": text, "model": model}),
)
HIDDEN = "***"
QUERY_FIELD = re.compile(r"[^&;]+")  # a field of a query: NAME=VALUE, or a bare value
LINE_END = re.compile(rb"\r\n|\r|\n")  # SSE's line ends
LARGEST = 64 * 2**20  # bytes of a tokenize answer or a stream's line (a million token ids take some 8 MiB)


class ServerError(ValueError):
    """The server could not be used; the message is the whole one-line explanation."""


def masked(url):
    """``url`` with its user information (all of it: a token is often given as the user name, the password empty),
    each value of its query (``?key=``) and its fragment replaced by ``***``. Text that is not a valid URL too, so
    that a mistyped one can be shown: all before its last ``@`` is then taken for the user information, which hides
    a password however it is written (a ``/`` or ``#`` in it, no scheme)."""
    scheme, sep, rest = url.partition("://")
    head, rest = (scheme + sep, rest) if sep else ("", url)
    if _problem(url) is None:  # a base URL: no query, no fragment
        netloc = urllib.parse.urlsplit(url).netloc  # what follows the "://"
        if "@" not in netloc:
            return url
        return f"{head}{HIDDEN}@{netloc.rpartition('@')[2]}{rest[len(netloc) :]}"
    if "@" in rest:
        head = f"{head}{HIDDEN}@"
        rest = rest.rpartition("@")[2]
    rest, hash_, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    query = QUERY_FIELD.sub(lambda field: _hidden_value(field[0]), query)
    return f"{head}{rest}{question}{query}{hash_}{HIDDEN if fragment else ''}"


def _hidden_value(field):
    """``name=***`` for a query's ``name=value``; ``***`` for a bare value."""
    name, equals, _ = field.partition("=")
    return f"{name}={HIDDEN}" if equals else HIDDEN


def _problem(text):
    """What makes ``text`` no base URL of a server (None: it is one)."""
    if any(char.isspace() or not char.isprintable() for char in text):
        return "it has a space or a control character"
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError:
        return "a '[' or ']' of the host is unbalanced or holds no IPv6 address"
    if parts.scheme.lower() not in ("http", "https"):
        return "the scheme must be http:// or https://"
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        return "the port must be a number from 1 to 65535"
    if not parts.hostname:
        return "it names no host"
    if parts.query or parts.fragment or "?" in text or "#" in text:
        return "a base URL has no query or fragment"
    import httpx

    try:
        httpx.URL(text)
    except Exception:  # httpx.InvalidURL, or what its IDNA encoding raises: the message would show the URL
        return "the host or port is not valid"
    return None


def base_url(text):
    """``text`` if it is a server's base URL, ``http(s)://HOST[:PORT][/PATH]``; else ValueError saying what is
    wrong, the URL shown :func:`masked`."""
    problem = _problem(text)
    if problem:
        raise ValueError(f"expected http://HOST[:PORT][/PATH] (or https), got {shown(masked(text), 80)}: {problem}")
    return text


def _secrets(api_key, url):
    """The values no message may show, longest first: the key, the URL's password (as written and decoded, and
    as the Basic header carries it), and a lone user name."""
    found = {api_key or ""}
    try:
        parts = urllib.parse.urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        user = password = None
    for value in (user if password is None else None, password):
        if value:
            found |= {value, urllib.parse.unquote(value)}
    if user is not None or password is not None:
        pair = f"{urllib.parse.unquote(user or '')}:{urllib.parse.unquote(password or '')}"
        found.add(base64.b64encode(pair.encode()).decode())
    return sorted(found - {""}, key=len, reverse=True)


def redacted(text, secrets):
    """``text`` with every occurrence of each of ``secrets`` replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, HIDDEN)
    return text


class Server:
    """``base_url`` (without ``/v1``) serving ``model``; ``transport`` replaces the network (tests)."""

    def __init__(self, base_url, model, api_key=None, timeout=120.0, transport=None):
        import httpx

        self.base_url = base_url.rstrip("/")
        self.shown_url = masked(self.base_url)
        self.model = model
        self._secrets = _secrets(api_key, self.base_url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, transport=transport)
        self._timeout = timeout
        self._tokenizer = None  # the index in TOKENIZERS that answered, once found

    def close(self):
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def redact(self, text):
        """``text`` without the credentials: for any message, also one formed elsewhere (documents)."""
        return redacted(str(text), self._secrets)

    def error(self, path, what):
        """The one place a message about the server is formed: ``what`` (our words, never the server's) went
        wrong at ``path``; the URL masked, the credentials blanked out."""
        return ServerError(self.redact(f"{self.shown_url}{path}: {what}"))

    def _late(self, path):
        return self.error(path, f"the request took longer than {self._timeout:g} s (--timeout)")

    def _failure(self, path, error):
        import httpx

        if isinstance(error, httpx.TimeoutException):
            return self._late(path)
        if isinstance(error, httpx.ConnectError):
            return self.error(path, "cannot connect (is the server running?)")
        if isinstance(error, httpx.HTTPStatusError):
            return self.error(path, f"HTTP {error.response.status_code}")
        return self.error(path, type(error).__name__)

    @contextlib.contextmanager
    def _post(self, path, body):
        """``(response, chunks)`` of a streamed POST: ``chunks`` its body's bytes as they come, ServerError once the
        request has taken longer than the timeout; an httpx error becomes a ServerError. httpx's own timeout
        still bounds each wait, so a request ends within about twice the timeout, however the server sends."""
        import httpx

        deadline = time.monotonic() + self._timeout

        def chunks(response):
            for chunk in response.iter_bytes():
                if time.monotonic() > deadline:
                    raise self._late(path)
                yield chunk

        try:
            with self._client.stream("POST", path, json=body) as response:
                if time.monotonic() > deadline:
                    raise self._late(path)
                yield response, chunks(response)
        except httpx.HTTPError as error:
            raise self._failure(path, error) from None

    def tokens(self, text):
        """The server's token ids of ``text`` (no special tokens added), or None if it has no tokenize endpoint."""
        order = range(len(TOKENIZERS)) if self._tokenizer is None else [self._tokenizer]
        for index in order:
            path, body = TOKENIZERS[index]
            with self._post(path, body(self.model, text)) as (response, chunks):
                if response.status_code in (404, 405, 422, 400) and self._tokenizer is None:
                    continue  # not this server's endpoint or body
                response.raise_for_status()
                content = bytearray()
                for chunk in chunks:
                    content += chunk
                    if len(content) > LARGEST:
                        raise self.error(path, f"the answer is over {LARGEST:,} bytes")
            ids = _token_ids(bytes(content))
            if ids is None:
                raise self.error(path, 'the answer is not {"tokens": [token ids]}')
            if not ids and text.strip() and self._tokenizer is None:
                continue  # llama.cpp answers a body it does not read with no tokens: not its body
            self._tokenizer = index
            return ids
        return None

    def complete(self, prompt, max_tokens):
        """``(ttft_ms, total_ms)`` of one streamed completion of ``prompt`` (greedy, ``max_tokens`` at most)."""
        path = "/v1/completions"
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
        start = time.perf_counter()
        first = None
        done = False
        with self._post(path, body) as (response, chunks):
            response.raise_for_status()
            for line in _lines(chunks):
                if line is None:
                    raise self.error(path, f"malformed stream (a line over {LARGEST:,} bytes)")
                if not line.strip() or line.startswith(":"):
                    continue
                if not line.startswith("data:"):
                    raise self.error(path, "malformed stream (a line without 'data:')")
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                if not _is_chunk(data):
                    raise self.error(path, "malformed stream (a chunk that is not a completion)")
                if first is None:
                    first = time.perf_counter()
        end = time.perf_counter()
        if first is None or not done:
            what = "no chunk" if first is None else "no 'data: [DONE]'"
            raise self.error(path, f"malformed stream ({what})")
        return (first - start) * 1000, (end - start) * 1000


def _token_ids(content):
    """The ids of a tokenize answer, ``{"tokens": [integers]}``; None for any other answer."""
    try:
        answer = json.loads(content)
    except (ValueError, RecursionError):
        return None
    ids = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(ids, list) or not all(type(token) is int for token in ids):
        return None
    return ids


def _lines(chunks):
    """The lines of a stream of byte chunks, decoded (a ``\\r\\n`` split between two chunks gives an extra empty
    line, which a stream's reader skips anyway); the last one even without its line end. None, and no more, for
    a line over ``LARGEST`` bytes: a fast server sending no line end must not fill the memory before the deadline."""
    pending = bytearray()
    for chunk in chunks:
        *complete, rest = LINE_END.split(chunk)
        if complete:
            complete[0] = bytes(pending) + complete[0]
            pending.clear()
            for line in complete:
                if len(line) > LARGEST:
                    yield None
                    return
                yield line.decode("utf-8", errors="replace")
        pending += rest
        if len(pending) > LARGEST:
            yield None
            return
    if pending:
        yield pending.decode("utf-8", errors="replace")


def _is_chunk(data):
    """Whether a streamed chunk is a completion's: a JSON object with a list of choices."""
    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError):
        return False
    return isinstance(chunk, dict) and isinstance(chunk.get("choices"), list)
