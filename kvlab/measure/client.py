"""An OpenAI-compatible server, as the measurement needs it: count tokens, and time a streamed completion.

Token counts come from the first of the servers' own endpoints that answers: vLLM's and SGLang's ``/tokenize``
(``{"model", "prompt"}``), llama.cpp's ``/tokenize`` (``{"content"}``) and llama-cpp-python's
``/extras/tokenize`` (``{"input"}``); each answers ``{"tokens": [...]}``. A completion is ``POST
/v1/completions`` with ``stream: true``: its TTFT is the time from sending the request to the first streamed
chunk (its first token), its total the time to the stream's end (``data: [DONE]``).

Every failure is a :class:`ServerError` whose message is one line naming the URL and what went wrong; the API
key travels only in the ``Authorization`` header and never into a message.
"""

import json
import time

__all__ = ["Server", "ServerError"]

TOKENIZERS = (  # (path, the body for a text)
    ("/tokenize", lambda model, text: {"model": model, "prompt": text, "add_special_tokens": False}),
    ("/tokenize", lambda model, text: {"content": text, "add_special": False}),
    ("/extras/tokenize", lambda model, text: {"input": text, "model": model}),
)


class ServerError(ValueError):
    """The server could not be used; the message is the whole one-line explanation."""


class Server:
    """``base_url`` (without ``/v1``) serving ``model``; ``transport`` replaces the network (tests)."""

    def __init__(self, base_url, model, api_key=None, timeout=120.0, transport=None):
        import httpx

        self.base_url = base_url.rstrip("/")
        self.model = model
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

    def _failure(self, path, error):
        import httpx

        url = self.base_url + path
        if isinstance(error, httpx.TimeoutException):
            return ServerError(f"{url}: no answer within {self._timeout:g} s")
        if isinstance(error, httpx.ConnectError):
            return ServerError(f"{url}: cannot connect (is the server running?)")
        if isinstance(error, httpx.HTTPStatusError):
            return ServerError(f"{url}: HTTP {error.response.status_code}")
        return ServerError(f"{url}: {type(error).__name__}")

    def tokens(self, text):
        """The server's token ids of ``text`` (no special tokens added), or None if it has no tokenize endpoint."""
        import httpx

        order = range(len(TOKENIZERS)) if self._tokenizer is None else [self._tokenizer]
        for index in order:
            path, body = TOKENIZERS[index]
            try:
                response = self._client.post(path, json=body(self.model, text))
            except httpx.HTTPError as error:
                raise self._failure(path, error) from None
            if response.status_code in (404, 405, 422, 400) and self._tokenizer is None:
                continue  # not this server's endpoint or body
            try:
                response.raise_for_status()
                ids = response.json()["tokens"]
            except httpx.HTTPStatusError as error:
                raise self._failure(path, error) from None
            except (ValueError, KeyError, TypeError):
                raise ServerError(f'{self.base_url + path}: the answer is not {{"tokens": [...]}}') from None
            if not isinstance(ids, list):
                raise ServerError(f'{self.base_url + path}: the answer is not {{"tokens": [...]}}')
            if not ids and text.strip() and self._tokenizer is None:
                continue  # llama.cpp answers a body it does not read with no tokens: not its body
            self._tokenizer = index
            return ids
        return None

    def complete(self, prompt, max_tokens):
        """``(ttft_ms, total_ms)`` of one streamed completion of ``prompt`` (greedy, ``max_tokens`` at most)."""
        import httpx

        path = "/v1/completions"
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
        start = time.perf_counter()
        first = None
        done = False
        try:
            with self._client.stream("POST", path, json=body) as response:
                response.raise_for_status()
                for line in response.iter_lines():
                    if not line.strip() or line.startswith(":"):
                        continue
                    if not line.startswith("data:"):
                        raise ServerError(f"{self.base_url + path}: malformed stream (a line without 'data:')")
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    _check_chunk(data, self.base_url + path)
                    if first is None:
                        first = time.perf_counter()
        except httpx.HTTPError as error:
            raise self._failure(path, error) from None
        end = time.perf_counter()
        if first is None or not done:
            what = "no chunk" if first is None else "no 'data: [DONE]'"
            raise ServerError(f"{self.base_url + path}: malformed stream ({what})")
        return (first - start) * 1000, (end - start) * 1000


def _check_chunk(data, url):
    """A streamed chunk must be a completion's: a JSON object with a list of choices (else ServerError)."""
    try:
        chunk = json.loads(data)
        valid = isinstance(chunk, dict) and isinstance(chunk.get("choices"), list)
    except ValueError:
        valid = False
    if not valid:
        raise ServerError(f"{url}: malformed stream (a chunk that is not a completion)")
