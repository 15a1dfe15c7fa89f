"""The lab's measurement taken from a real server: its passes over its documents, one record per request.

Every request is a document followed by its own question (:mod:`kvlab.measure.documents`), sent in the
workload's order: the lab's passes one after another, each reading the documents forward or in reverse, or
LMCache's long_doc_qa rounds (a warm-up reading each document once, then the queries). Each yields a record of
the lab's schema, ``{"config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms"}`` (ms rounded to 2
decimals), as :mod:`kvlab.latency.measurement` (and the lab's ``summarize.py``) reads it.
"""

from kvlab.measure.documents import documents, question

__all__ = ["Tokenizer", "lab_rounds", "long_doc_qa_rounds", "measure", "merged", "requests"]


class Tokenizer:
    """The server's token count, as :func:`kvlab.measure.documents.documents` asks for it."""

    def __init__(self, server):
        self.server = server

    def count(self, text):
        return len(self.server.tokens(text))

    def first(self, text):
        ids = self.server.tokens(text)
        return ids[0] if ids else None


def lab_rounds(docs, passes):
    """The lab's ``(pass name, documents in reading order)``: ``passes`` are ``(name, "fwd" | "rev")``."""
    return [(name, list(range(docs)) if order == "fwd" else list(range(docs - 1, -1, -1))) for name, order in passes]


def long_doc_qa_rounds(docs, repeat_count, repeat_mode, shuffle_seed):
    """long_doc_qa's rounds as kvlab's workload orders them (``kvlab/workloads/__init__.py``)."""
    from kvlab.workloads import LongDocQAWorkload

    workload = LongDocQAWorkload(
        num_documents=docs, document_length=1, repeat_count=repeat_count, repeat_mode=repeat_mode,
        shuffle_seed=shuffle_seed,
    )  # fmt: skip
    return list(zip(workload.rounds, workload.orders(), strict=True))


def requests(docs, tokens, rounds, tokenizer=None):
    """``(round name, doc, doc_tokens, prompt)`` of every request in the order sent; ``rounds``: ``(name,
    documents in reading order)``."""
    made = documents(docs, tokens, tokenizer)
    number = 0
    for name, order in rounds:
        for doc in order:
            yield name, doc, made[doc].tokens, f"{made[doc].text} {question(number)}"
            number += 1


def measure(server, config, docs, tokens, rounds, max_tokens, progress=None):
    """The records of one config: every request of the rounds through ``server``, timed."""
    tokenizer = Tokenizer(server) if server.tokens("abc") is not None else None
    records = []
    for name, doc, doc_tokens, prompt in requests(docs, tokens, rounds, tokenizer):
        ttft, total = server.complete(prompt, max_tokens)
        records.append(
            {
                "config": config,
                "pass": name,
                "doc": doc,
                "doc_tokens": doc_tokens,
                "ttft_ms": round(ttft, 2),
                "total_ms": round(total, 2),
            }
        )
        if progress is not None:
            progress(1)
    return records


def merged(path, config, records):
    """The file's records of other configs, kept as they are, then ``records``; a file that does not exist yet
    is empty. A bad line: :class:`kvlab.util.files.InputError` naming ``file:line``."""
    import os

    from kvlab.latency.measurement import read_records

    kept = []
    if os.path.exists(path):
        kept = [record for _, record in read_records(path) if record["config"] != config]
    return kept + records
