"""``kvlab measure``: the lab's TTFT measurement taken from a real OpenAI-compatible server (vLLM, SGLang,
llama.cpp, ...): the passes over ``--docs`` documents of ``--tokens`` tokens (or long_doc_qa's rounds), each
request a document and its own question, streamed; one record per request under ``--config-name`` in
``--out``, whose other configs' records are kept. The API key, if the server needs one, is read from the
environment variable named by ``--api-key-env`` (default KVLAB_API_KEY) and is never printed, nor is a password in
``--base-url``; nothing the server sends is shown in a message (it may echo the key)."""

import os
from dataclasses import dataclass

from kvlab.cli.base import ERRORS, Outputs, Parser, UsageError, add_arguments, run, summary
from kvlab.cli.types import named_order, number_in
from kvlab.measure.client import base_url
from kvlab.util.errors import describe
from kvlab.util.files import number_text, shown
from kvlab.util.settings import setting
from kvlab.workloads import whole_number

PASSES = [("pass1-cold", "fwd"), ("pass2-replay", "fwd"), ("pass3-reverse", "rev")]  # the lab's
MAX_TOKENS = 10**6
seconds = number_in(0.001, 86400, "seconds from 0.001 to 86400")


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    add_arguments(parser, MeasureSettings)
    return parser


def long_doc_qa(text):
    """``COUNT:MODE[:SEED]``: long_doc_qa's repeat count, repeat mode and shuffle seed (default 0)."""
    from kvlab.workloads import REPEAT_MODES

    count, _, rest = text.partition(":")
    mode, _, seed = rest.partition(":")
    if not number_text(count, whole=True) or mode not in REPEAT_MODES or not number_text(seed or "0", whole=True):
        raise ValueError(f"expected COUNT:MODE[:SEED] with MODE one of {', '.join(REPEAT_MODES)}, got {text!r}")
    return int(count), mode, int(seed or 0)


@dataclass
class MeasureSettings:
    base_url: str = setting(help="the server's address, e.g. http://127.0.0.1:8000", convert=base_url, group="server")
    model: str = setting(help="the model name the server serves", group="server")
    docs: int = setting(help="documents (<= 1024)", convert=whole_number(1, 1024), group="workload")
    tokens: int = setting(help="tokens per document", convert=whole_number(1, MAX_TOKENS), group="workload")
    config_name: str = setting(help="the config the records are filed under")
    out: str = setting(help="the measurement (JSONL): this config's records replaced", file="output")
    api_key_env: str = setting(
        "KVLAB_API_KEY", help="environment variable holding the API key", metavar="NAME", group="server"
    )
    timeout: float = setting(120.0, help="seconds per request, all told (default 120)", convert=seconds, group="server")
    passes: list = setting(
        None,
        help="a pass over the documents, in order (repeat; default the lab's three)",
        convert=named_order,
        repeat=True,
        option="--pass",
        metavar="NAME:fwd|rev",
        group="workload",
    )
    long_doc_qa: tuple = setting(
        None,
        help="LMCache's long_doc_qa rounds instead of passes: a warm-up, then each document queried COUNT times"
        " in MODE order (tile, interleave or random)",
        convert=long_doc_qa,
        metavar="COUNT:MODE[:SEED]",
        group="workload",
    )
    max_tokens: int = setting(4, help="tokens to generate (default 4)", convert=whole_number(1, 4096), group="workload")


def execute(args, parser):
    from kvlab.cli.replay import progress_bar
    from kvlab.measure.client import Server, ServerError
    from kvlab.measure.example import jsonl
    from kvlab.measure.lab import lab_rounds, long_doc_qa_rounds, measure, merged

    passes = args.passes or PASSES
    names = [name for name, _ in passes]
    if len(set(names)) != len(names):
        raise UsageError("--pass: a name is given twice")
    if args.long_doc_qa and args.passes:
        raise UsageError("--pass and --long-doc-qa: one workload at a time")
    if args.long_doc_qa:
        rounds = long_doc_qa_rounds(args.docs, *args.long_doc_qa)
    else:
        rounds = lab_rounds(args.docs, passes)
    if not args.config_name.strip() or len(args.config_name) > 200:
        raise UsageError("--config-name must be a name of 1 to 200 characters")
    merged(args.out, args.config_name, [])  # a bad existing file stops here, before the server is used
    key = os.environ.get(args.api_key_env)
    if key and not all(" " < char < "\x7f" for char in key):
        raise UsageError(f"the API key ({shown(args.api_key_env)}) has a character an HTTP header cannot carry")
    bar = progress_bar(sum(len(order) for _, order in rounds))
    try:
        with Server(args.base_url, args.model, key, args.timeout) as server:
            try:
                update = bar.update if bar else None
                records = measure(server, args.config_name, args.docs, args.tokens, rounds, args.max_tokens, update)
            except ERRORS as error:  # the one line, without the credentials whatever formed it (documents too)
                raise ServerError(server.redact(describe(error))) from None
    finally:
        if bar:
            bar.close()
    return Outputs({args.out: jsonl(merged(args.out, args.config_name, records))})


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
