"""Workload sources for the block-level replay: each reader turns its own input into requests.

A request is the chain of block keys of its prompt plus its length in tokens. Block ``i``'s key
stands for the whole prefix up to block ``i`` (as a prefix-cache hash does), so two requests share
a block only if they share everything before it. Every block is ``block_tokens`` long except
perhaps the last. Requests belong to rounds (the lab's passes, long_doc_qa's warm-up and query
rounds); the replay reports each round apart.

Each source gives its requests two ways: ``requests()`` as Python objects, for the reference engines, and
``batches()`` as typed arrays with dense keys (``kvlab/workloads/stream.py``), for the compiled ones; both give the same
requests. numpy, numba and the trace parser are imported only by the way a command uses (a small replay's
start-up is most of its cost). A new source is one :class:`Workload` subclass (its options, its rounds, both
hooks) and one line in :data:`WORKLOADS`; a new trace format is one :class:`kvlab.workloads.traces.TraceFormat`.
"""

import math
import random
from collections import Counter
from dataclasses import fields, make_dataclass
from pathlib import Path
from typing import Any, NamedTuple

from kvlab.util.errors import SettingError
from kvlab.util.files import number_text, shown
from kvlab.util.numbers import MAX_WHOLE
from kvlab.util.settings import check_value, flag, setting
from kvlab.workloads.traces import FORMATS, TraceError

__all__ = [
    "MAX_ACCESSES",
    "MAX_CONVERSATIONS",
    "MAX_ROUNDS",
    "MAX_WHOLE",
    "WORKLOADS",
    "option",
    "Request",
    "Timed",
    "Workload",
    "WorkloadError",
    "repeat_documents",
]

REPEAT_MODES = ("tile", "interleave", "random")
TIMESTAMP_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}  # a requests trace's --timestamp-unit: seconds per unit
HASH_CHAININGS = ("chained", "per-block")  # a requests trace's --hash-chaining (kvlab/workloads/requests.py)
ORDERS = ("fwd", "rev")
READY_QUEUE_POLICIES = ("random", "fifo")  # bench_multiturn's --ready-queue-policy (kvlab/workloads/benchmarks.py)

MAX_ACCESSES = 10**8  # block accesses of a generated workload (a trace has no such limit: it is streamed)
# Users or clients of a benchmark (multi_round_qa, bench_multiturn), each set up one by one before the first request
# (multi_round_qa's ramp-up, about 5 us a user; bench_multiturn's ready queue): 10**6 take seconds, 10**8 took 25
# minutes (issue 36). The benchmarks' own runs have tens to hundreds.
MAX_CONVERSATIONS = 10**6
# Rounds of a benchmark's conversation (--num-rounds; bench_multiturn's --min-rounds, --max-rounds): the benchmarks'
# defaults and documented runs ask 5 or 10 (docs/workloads.md), and at 10**4 the last prompt of multi_round_qa's default
# growth (119 tokens a round) is 1.2 million tokens, past every shipped model's context (the longest, 393,216:
# models/Devstral-Small-2-24B-Instruct/config.json). 10**6 printed 14 million lines, 10**7 ran out of memory (issue 36).
MAX_ROUNDS = 10**4


class WorkloadError(ValueError):
    """Bad workload input or settings; the message is the whole one-line explanation."""


def too_many_accesses(name, accesses, at_least=False):
    """The WorkloadError of a generated workload past :data:`MAX_ACCESSES` block accesses."""
    return WorkloadError(
        f"workload {name} would make {'at least ' if at_least else ''}{accesses} block accesses; at most"
        f" {MAX_ACCESSES} are generated (replay a trace for more)"
    )


class Request(NamedTuple):
    round: int  # index into the workload's rounds
    label: Any  # what the per-request table shows of it: a document number, a timestamp
    keys: list  # block keys, head first
    tokens: int  # prompt length; every block is full but perhaps the last


class Timed(NamedTuple):
    """A request as the time-aware replay serves it (``kvlab/simulator``): its prompt and, where the source has them,
    its arrival on the source's clock and its output length."""

    keys: list  # block keys (ints), head first
    tokens: int  # prompt length
    arrival_s: float | None  # the trace's timestamp in seconds (None: the source has no clock)
    output_tokens: int | None  # the trace's output length (None: the source has none)


def option(name, convert, default, help, choices=None):
    """One setting of a source, declared as every setting is (kvlab/util/settings.py): ``--flag-name`` on the command
    line, ``flag_name`` in config.yaml and the Python API; a dataclass field."""
    declared = setting(default, help=help, convert=convert, choices=choices)
    return fields(make_dataclass("Option", [(name, object, declared)]))[0]


def as_int(value):
    """``value`` as an int if it is one or its text, else None: a float or a bool is a mistake, not a number."""
    if type(value) is int:
        return value
    if isinstance(value, str) and number_text(value, whole=True) and len(value) <= 40:  # int() stops at 4,300
        return int(value)
    return None


def whole_number(minimum, maximum=MAX_WHOLE):
    """A converter to an int from ``minimum`` to ``maximum`` (an argparse type and a settings check at once)."""

    def convert(value):
        number = as_int(value)
        if number is None or number < minimum:
            raise ValueError(f"expected a whole number >= {minimum}, got {shown(value)}")
        if number > maximum:
            raise ValueError(f"expected a whole number <= {maximum}, got {shown(value)}")
        return number

    convert.__name__ = f"whole number >= {minimum}"
    return convert


def any_int(value):
    number = as_int(value)
    if number is None or abs(number) > MAX_WHOLE:
        raise ValueError(f"expected a whole number from -{MAX_WHOLE} to {MAX_WHOLE}, got {shown(value)}")
    return number


def hash_chaining(text):
    """``--hash-chaining``: one of :data:`HASH_CHAININGS` ("" while undeclared)."""
    if text and text not in HASH_CHAININGS:
        raise ValueError(f"expected {' or '.join(HASH_CHAININGS)}, got {shown(text)}")
    return text


def positive_number(value):
    """A converter to a finite float > 0 (a rate), from a number or its text."""
    number = float(value) if type(value) in (int, float) or number_text(value) else math.nan
    if not 0 < number < math.inf:
        raise ValueError(f"expected a positive number, got {shown(value)}")
    return number


def switch(value):
    """A converter to a bool from a bool or ``true`` / ``false`` (a benchmark's on/off flag)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"expected true or false, got {shown(value)}")


def pass_list(text):
    """``fwd,fwd,rev`` -> ``["fwd", "fwd", "rev"]`` (the lab's ``--passes``)."""
    orders = text.split(",") if isinstance(text, str) else list(text)
    bad = [order for order in orders if order not in ORDERS]
    if bad or not orders:
        raise ValueError(f"expected a comma-separated list of fwd/rev, got {shown(text)}")
    return orders


class Workload:
    """One source of requests. Subclasses set ``name``, ``options``, ``label_name`` and the two hooks."""

    name = ""
    options: tuple = ()  # option()'s fields
    label_name = "label"
    default_block_tokens = 256
    rounds: list[str] = []
    read_fraction = None  # of the input read so far by ``batches`` (None: unknown)

    def __init__(self, block_tokens=None, **settings):
        try:
            self.block_tokens = whole_number(1)(self.default_block_tokens if block_tokens is None else block_tokens)
        except ValueError as error:
            raise WorkloadError(f"--block-tokens: {error}") from None
        unknown = set(settings) - {option.name for option in self.options}
        if unknown:
            raise WorkloadError(f"workload {self.name!r} has no setting {sorted(unknown)[0]!r}")
        for option in self.options:
            value = settings.get(option.name)
            if value is None and option.default is None:
                raise WorkloadError(f"workload {self.name} needs {flag(option.name)}")
            try:
                value = check_value(option.name, option.metadata, option.default if value is None else value)
            except SettingError as error:
                raise WorkloadError(str(error)) from None
            setattr(self, option.name, value)

    def describe(self):
        """The settings that define this workload, as the replay's JSON shows them."""
        return {"source": self.name, **{option.name: getattr(self, option.name) for option in self.options}}

    def requests(self):
        """Yield the requests in order (a generator: a trace is streamed, not loaded)."""
        raise NotImplementedError

    def batches(self):
        """Yield the requests in order as :class:`kvlab.workloads.stream.Columns` of bounded size, keys dense from 0
        (here made from ``requests()``; a source overrides it with a faster way)."""
        from kvlab.workloads.stream import columns_of

        return columns_of(self.requests())

    def timed(self):
        """Yield each request as a :class:`Timed` (keys dense, as in :meth:`batches`): a source with a clock and
        output lengths (a trace) overrides it."""
        for columns in self.batches():
            keys = columns.keys.tolist()
            start = 0
            for tokens, count in zip(columns.tokens.tolist(), columns.counts.tolist(), strict=True):
                yield Timed(keys[start : start + count], tokens, None, None)
                start += count

    seconds = 1.0  # one unit of :meth:`dense_columns`' labels, in seconds

    def dense_columns(self, batch=1 << 16):
        """``(Columns, output lengths)`` per batch of :meth:`timed`'s requests, keys dense from 0 in order of first
        appearance, labels their arrivals in :attr:`seconds` (0 each where the source has no clock: its order is
        the file's), outputs a list (Nones where the source has none): what ``kvlab trace convert`` writes."""
        import itertools

        import numpy as np

        from kvlab.workloads.stream import Columns

        timed = self.timed()
        while chunk := list(itertools.islice(timed, batch)):
            yield (
                Columns(
                    np.zeros(len(chunk), dtype=np.int64),
                    np.array([request.arrival_s or 0.0 for request in chunk], dtype=np.float64),
                    np.array([request.tokens for request in chunk], dtype=np.int64),
                    np.array([len(request.keys) for request in chunk], dtype=np.int64),
                    np.array([key for request in chunk for key in request.keys], dtype=np.int64),
                ),
                [request.output_tokens for request in chunk],
            )

    def request_ids(self):
        """The requests' own ids in order, once read (``--per-request`` keeps them), or None: a source without."""
        return None

    def __len__(self):
        """Number of requests, for the progress bar (0 when unknown before reading)."""
        return 0

    def accesses(self):
        """The workload's block accesses, where known before reading (None: a trace)."""
        return None

    def token_bound(self):
        """An upper bound on the input tokens of the whole workload, where one is known before reading (a
        trace's input tokens are at most its block accesses x its block: no trace that fits on a disk nears
        2**62)."""
        return 0


class DocumentWorkload(Workload):
    """Documents ``0 .. n-1`` of equal length, each its own chain of blocks; rounds read them in some order."""

    label_name = "document"

    def check_size(self, documents, tokens):
        """WorkloadError when the workload would make more than :data:`MAX_ACCESSES` block accesses."""
        accesses = len(self) * math.ceil(tokens / self.block_tokens)
        if accesses > MAX_ACCESSES or documents > MAX_ACCESSES:
            raise too_many_accesses(self.name, accesses)

    def blocks_per_document(self):
        raise NotImplementedError

    def accesses(self):
        return len(self) * self.blocks_per_document()

    def document_chains(self, documents, tokens):
        """Each document's block keys; every request of a document shares its one list (read-only)."""
        blocks = math.ceil(tokens / self.block_tokens)
        return [list(range(doc * blocks, (doc + 1) * blocks)) for doc in range(documents)]

    def document_requests(self, order_per_round, documents, tokens):
        chains = self.document_chains(documents, tokens)
        for round_index, order in enumerate(order_per_round):
            for doc in order:
                yield Request(round_index, doc, chains[doc], tokens)

    def document_batches(self, order_per_round, tokens, batch_keys=1 << 20):
        """The same requests as typed arrays: document ``d``'s blocks are keys ``d * blocks ...``."""
        import numpy as np

        from kvlab.workloads.stream import Columns

        blocks = math.ceil(tokens / self.block_tokens)
        per_batch = max(1, batch_keys // max(blocks, 1))
        offsets = np.arange(blocks, dtype=np.int64)
        done, total = 0, sum(map(len, order_per_round))
        for round_index, order in enumerate(order_per_round):
            order = np.asarray(order, dtype=np.int64)
            for start in range(0, len(order), per_batch):
                docs = order[start : start + per_batch]
                count = len(docs)
                done += count
                self.read_fraction = done / total
                yield Columns(
                    np.full(count, round_index, dtype=np.int64),
                    docs,
                    np.full(count, tokens, dtype=np.int64),
                    np.full(count, blocks, dtype=np.int64),
                    (docs[:, None] * blocks + offsets).ravel().astype(np.int32),  # < MAX_ACCESSES
                )


class LabWorkload(DocumentWorkload):
    """The lab's scenario: ``docs`` documents of ``tokens`` tokens read pass after pass (fwd/rev)."""

    name = "lab"
    options = (
        option("docs", whole_number(0), 10, "number of documents (default 10)"),
        option("tokens", whole_number(1), 5011, "tokens per document (default 5011)"),
        option("passes", pass_list, "fwd,fwd,rev", "comma-separated fwd/rev passes (default fwd,fwd,rev)"),
    )

    def __init__(self, block_tokens=None, **settings):
        super().__init__(block_tokens, **settings)
        self.check_size(self.docs, self.tokens)

    @property
    def rounds(self):
        return [f"pass{number}" for number in range(1, len(self.passes) + 1)]

    def orders(self):
        forward = list(range(self.docs))
        return [forward if order == "fwd" else forward[::-1] for order in self.passes]

    def requests(self):
        return self.document_requests(self.orders(), self.docs, self.tokens)

    def batches(self):
        return self.document_batches(self.orders(), self.tokens)

    def token_bound(self):
        return len(self) * self.tokens

    def blocks_per_document(self):
        return math.ceil(self.tokens / self.block_tokens)

    def __len__(self):
        return self.docs * len(self.passes)


def repeat_documents(documents, repeat_count, mode, seed):
    """The query round of LMCache's ``benchmarks/long_doc_qa``: its ``repeat_prompts`` ordering.

    ``tile``: the whole list ``repeat_count`` times; ``interleave``: each document ``repeat_count``
    times in a row; ``random``: the tiled list shuffled by Python's ``random`` seeded with ``seed``
    (the benchmark calls ``random.seed(shuffle_seed)`` and then ``random.shuffle``).
    """
    documents = list(documents)
    if mode == "tile":
        return documents * repeat_count
    if mode == "interleave":
        return [doc for doc in documents for _ in range(repeat_count)]
    if mode == "random":
        repeated = documents * repeat_count
        random.Random(seed).shuffle(repeated)
        return repeated
    raise WorkloadError(f"--repeat-mode: expected one of {', '.join(REPEAT_MODES)}, got {mode!r}")


class LongDocQAWorkload(DocumentWorkload):
    """LMCache's long_doc_qa benchmark: a warm-up round (each document once, in order), then the query round."""

    name = "long_doc_qa"
    rounds = ["warmup", "query"]
    options = (
        option("num_documents", whole_number(0), 8, "number of documents (default 8, as the benchmark)"),
        option("document_length", whole_number(1), 20000, "tokens per document (default 20000)"),
        option("repeat_count", whole_number(0), 2, "times each document is queried (default 2)"),
        option(
            "repeat_mode",
            str,
            "random",
            "order of the query round: tile, interleave or random (default random)",
            REPEAT_MODES,
        ),
        option("shuffle_seed", any_int, 0, "seed of the random mode (default 0)"),
    )

    def __init__(self, block_tokens=None, **settings):
        super().__init__(block_tokens, **settings)
        self.check_size(self.num_documents, self.document_length)

    def orders(self):
        documents = range(self.num_documents)
        query = repeat_documents(documents, self.repeat_count, self.repeat_mode, self.shuffle_seed)
        return [list(documents), query]

    def requests(self):
        return self.document_requests(self.orders(), self.num_documents, self.document_length)

    def batches(self):
        return self.document_batches(self.orders(), self.document_length)

    def token_bound(self):
        return len(self) * self.document_length

    def blocks_per_document(self):
        return math.ceil(self.document_length / self.block_tokens)

    def __len__(self):
        return self.num_documents * (1 + self.repeat_count)


class ConversationWorkload(Workload):
    """Conversations that only grow by appending (kvlab/workloads/benchmarks.py): a request is a client's or user's
    context so far, its rounds are its turns. A subclass sets ``growth`` (its prompts' lengths), ``shared`` (the tokens
    every conversation begins with), ``most`` (the most turns), ``output_tokens`` and ``turns()``, then calls
    :meth:`size`."""

    shared = 0
    first_label = 0  # the benchmark's number of its first conversation
    output_tokens = None

    @property
    def rounds(self):
        """The rounds some request reaches (a multi_round_qa user may run out of ``--time`` before ``--num-rounds``)."""
        return [f"round{number}" for number in range(1, self.reached + 1)]

    def turns(self):
        """The requests in order, as :class:`kvlab.workloads.benchmarks.Turn`."""
        raise NotImplementedError

    def arrival(self, turn):
        """The request's arrival on the benchmark's clock (None: the benchmark has none that is not the server's)."""
        return None

    def size(self, counts):
        """Keep the workload's size from ``{turns: conversations making that many}``; refuse one past
        :data:`MAX_ACCESSES`."""
        self.reached = max((turns for turns, many in counts.items() if many), default=0)
        self._requests = sum(turns * many for turns, many in counts.items())
        self._tokens = sum(self.growth.sum_tokens(turns) * many for turns, many in counts.items())
        self._accesses = sum(self.growth.sum_blocks(turns, self.block_tokens) * many for turns, many in counts.items())
        if self._accesses > MAX_ACCESSES:
            raise too_many_accesses(self.name, self._accesses)

    def requests(self):
        from kvlab.workloads.benchmarks import block_keys

        span = self.growth.tokens(self.most) + 1  # past every prompt's length
        for done, turn in enumerate(self.turns(), 1):
            tokens = self.growth.tokens(turn.turn)
            keys = block_keys(turn.conversation, tokens, self.block_tokens, self.shared, span)
            self.read_fraction = done / self._requests
            yield Request(turn.turn, turn.conversation + self.first_label, keys, tokens)

    def timed(self):
        """Each request with the benchmark's output length and, where it has a clock, its arrival (else ``kvlab
        simulate`` takes ``--rate`` or ``--clients``)."""
        for request, turn in zip(super().timed(), self.turns(), strict=True):
            yield request._replace(arrival_s=self.arrival(turn), output_tokens=self.output_tokens)

    def __len__(self):
        return self._requests

    def accesses(self):
        return self._accesses

    def token_bound(self):
        return self._tokens


NUM_ROUNDS = option(
    "num_rounds",
    whole_number(1, MAX_ROUNDS),
    5,
    f"rounds of each conversation (default 5: bench_multiturn's default, multi_round_qa's documented example; at most"
    f" {MAX_ROUNDS:,})",
)


class BenchMultiturnWorkload(ConversationWorkload):
    """SGLang's ``benchmark/hicache/bench_multiturn.py`` (sgl-project/sglang at 0986bed8e279; kvlab/workloads/
    benchmarks.py, docs/workloads.md): each client's first prompt is ``request_length`` tokens, and each round its
    prompt is all it sent and got before plus a new sub-question; in the order its ReadyQueue pops them
    (:func:`kvlab.workloads.benchmarks.multiturn_order`). It has no clock but the server's: ``kvlab simulate --rate R``
    plays ``--request-rate R`` (Poisson gaps, as its sender sleeps ``random.expovariate(request_rate)``), without its
    cap of ``--max-parallel`` requests out and its round barrier; ``--clients P`` plays the cap without the rate."""

    name = "bench_multiturn"
    label_name = "client"
    default_block_tokens = 64  # HiCache's documented --page-size (SGLang's own default page is one token)
    options = (
        option(
            "num_clients",
            whole_number(0, MAX_CONVERSATIONS),
            256,
            f"clients, a conversation each (default 256, at most {MAX_CONVERSATIONS:,})",
        ),
        NUM_ROUNDS,
        option(
            "min_rounds",
            whole_number(0, MAX_ROUNDS),
            0,
            "fewest rounds of a client, drawn per client (default 0: --num-rounds)",
        ),
        option("max_rounds", whole_number(0, MAX_ROUNDS), 0, "most rounds of a client (default 0: --num-rounds)"),
        option("request_length", whole_number(1), 512, "tokens of a client's first prompt (default 512)"),
        option(
            "sub_question_input_length",
            whole_number(0),
            0,
            "tokens of each later round's new question (0, the default: --request-length)",
        ),
        option("output_length", whole_number(0), 64, "tokens of each output (default 64)"),
        option(
            "max_parallel",
            whole_number(1),
            128,
            "most requests out at once; it orders them only without the round barrier (default 128)",
        ),
        option(
            "request_rate",
            positive_number,
            1.0,
            "requests per second it sends (default 1): recorded, the order does not depend on it; kvlab simulate"
            " --rate plays it",
        ),
        option(
            "ready_queue_policy",
            str,
            "random",
            f"which ready request goes next, {' or '.join(READY_QUEUE_POLICIES)} (default random)",
            READY_QUEUE_POLICIES,
        ),
        option(
            "enable_round_barrier",
            switch,
            False,
            "round i+1 is sent after all of round i came back (a switch; or true / false; default false)",
        ),
        option("multiturn_seed", any_int, 1, "its --seed, of the ready queue's draws (default 1)"),
    )

    def __init__(self, block_tokens=None, **settings):
        from kvlab.workloads.benchmarks import Growth, multiturn_rounds

        super().__init__(block_tokens, **settings)
        low, high = self.min_rounds, self.max_rounds  # WorkloadGenerator.__init__'s rule, and its messages
        if not low and not high:
            low = high = self.num_rounds
        low, high = low or high, high or low
        if low > high:
            raise WorkloadError(f"--min-rounds ({low}) must be <= --max-rounds ({high})")
        self.most = high
        self.growth = Growth(
            self.request_length, self.output_length + (self.sub_question_input_length or self.request_length)
        )
        self.output_tokens = self.output_length
        if self.num_clients * low > MAX_ACCESSES:  # before a draw per client
            raise too_many_accesses(self.name, self.num_clients * low, at_least=True)
        rng = random.Random(self.multiturn_seed)
        if low == high:  # no draw: the size without a list of clients
            self.totals, counts = None, {low: self.num_clients}
        else:
            self.totals = multiturn_rounds(self.num_clients, low, high, rng)
            counts = Counter(self.totals)
        self._state = rng.getstate()  # what the ready queue draws from next
        self.size(counts)

    def turns(self):
        from kvlab.workloads.benchmarks import multiturn_order

        rng = random.Random()
        rng.setstate(self._state)
        totals = self.totals or [self.most] * self.num_clients
        return multiturn_order(totals, self.ready_queue_policy, self.max_parallel, self.enable_round_barrier, rng)


class MultiRoundQAWorkload(ConversationWorkload):
    """LMCache's ``benchmarks/multi_round_qa/multi-round-qa.py`` (LMCache/LMCache at 2cdc3a84679f; kvlab/workloads/
    benchmarks.py, docs/workloads.md): users join at a steady pace and ask ``num_rounds`` questions ``num_users /
    qps`` seconds apart; a user's first prompt is the system prompt all users share, its own context and a question,
    and each later one appends the answer and the next question. Its clock is the requests' arrivals
    (:class:`kvlab.workloads.benchmarks.QASessions`), for ``kvlab simulate`` without ``--rate``."""

    name = "multi_round_qa"
    label_name = "user"
    first_label = 1  # user ids count from --init-user-id 0 + 1
    default_block_tokens = 256  # LMCache's chunk
    options = (
        option(
            "num_users",
            whole_number(1, MAX_CONVERSATIONS),
            10,
            f"users at once (default 10, at most {MAX_CONVERSATIONS:,}; the benchmark needs each of its flags,"
            " kvlab's defaults are its documented example's)",
        ),
        NUM_ROUNDS,
        option(
            "shared_system_prompt",
            whole_number(0),
            1000,
            "tokens of the system prompt all users share (default 1000)",
        ),
        option(
            "user_history_prompt",
            whole_number(0),
            2000,
            "tokens of each user's own context (default 2000)",
        ),
        option("answer_len", whole_number(0), 100, "tokens of each answer (default 100)"),
        option(
            "question_len",
            whole_number(0),
            19,
            "tokens of each question, kvlab's: the benchmark asks one sentence, 'Here's question #N: can you tell"
            " me a new long story with a happy ending?', 19 words and marks (default 19)",
        ),
        option("qps", positive_number, 0.5, "requests per second of all users (default 0.5)"),
        option(
            "time",
            whole_number(0),
            600,
            "seconds the benchmark runs (it runs until Ctrl-C without; kvlab's default 600)",
        ),
    )

    def __init__(self, block_tokens=None, **settings):
        from kvlab.workloads.benchmarks import STEP, Growth, QASessions

        super().__init__(block_tokens, **settings)
        self.shared, self.most, self.output_tokens = self.shared_system_prompt, self.num_rounds, self.answer_len
        question = self.question_len
        self.growth = Growth(
            self.shared_system_prompt + self.user_history_prompt + question, self.answer_len + question
        )
        if not self.growth.first:
            raise WorkloadError(
                "workload multi_round_qa: a prompt needs a token, and --shared-system-prompt, --user-history-prompt and"
                " --question-len are all 0"
            )
        try:
            self.clock = QASessions(self.num_users, self.num_rounds, self.qps)
        except ValueError as error:
            raise WorkloadError(f"--qps: {error}") from None
        self.steps_per_s = int(1 / STEP)
        self.last = (
            self.time * self.steps_per_s
        )  # the steps it runs: it stops once more than --time seconds have passed
        joined = self.clock.sessions(self.last) - len(self.clock.ramp)  # each sends one request at least
        if joined > MAX_ACCESSES:
            raise too_many_accesses(self.name, joined, at_least=True)
        self.size(self.clock.counts(self.last))

    def turns(self):
        return self.clock.schedule(self.last)

    def arrival(self, turn):
        return turn.step / self.steps_per_s


class TraceWorkload(Workload):
    """A trace of requests at block granularity (``kvlab/workloads/traces.py``): streamed, a bad line stops the replay
    with ``file:line: what is wrong``. The hash ids are chained, so blocks of ``k`` trace blocks are keyed by
    the last id of each group of ``k``; blocks of ``1/k`` of a trace block (as aisimulate cuts a Mooncake trace's
    512-token blocks into an engine's 64-token ones) are keyed by the trace block and their place in it, so a
    piece is reused only behind the same prefix."""

    rounds = ["trace"]
    label_name = "timestamp"
    options = (option("trace", str, None, "the trace file (JSONL, .jsonl.gz, or - for standard input)"),)
    format = None  # a kvlab.workloads.traces.TraceFormat

    def __init__(self, block_tokens=None, **settings):
        super().__init__(block_tokens, **settings)
        unit = self.unit_tokens
        if self.block_tokens % unit and unit % self.block_tokens:
            raise WorkloadError(
                f"--block-tokens must be a multiple or a divisor of the trace's {unit}-token blocks,"
                f" got {self.block_tokens}"
            )
        self.group = max(1, self.block_tokens // unit)
        self.split = max(1, unit // self.block_tokens)

    @property
    def default_block_tokens(self):
        return self.format.block_tokens

    @property
    def unit_tokens(self):
        """The tokens of the blocks the trace's keys are made in."""
        return self.format.block_tokens

    @property
    def seconds(self):
        """One unit of the trace's timestamps, in seconds."""
        return self.format.seconds

    def _read(self):
        """The trace's :class:`kvlab.workloads.traces.Batch` es."""
        from kvlab.workloads.traces import read

        return read(self.trace, self.format)

    def describe(self):
        return {"source": self.name, "trace": Path(self.trace).name}  # no absolute path in an artifact

    def batches(self):
        from kvlab.workloads.dense import Interner

        interner = Interner()
        for columns in self._columns():
            yield columns._replace(keys=interner.dense(columns.keys))

    def requests(self):
        from kvlab.workloads.stream import requests_of

        for columns in self._columns():
            for request in requests_of(columns):
                yield Request(*request)

    def timed(self):
        """The trace's requests as :class:`Timed`, keyed by the trace's own ids (blocks cut from a trace block: by
        dense ids, :meth:`_columns`), so that nothing grows with the trace but what the engine holds."""
        seconds = self.seconds
        for columns, outputs in self.timed_columns():
            keys = columns.keys.tolist()
            start = 0
            rows = zip(columns.labels.tolist(), columns.tokens.tolist(), columns.counts.tolist(), outputs, strict=True)
            for label, tokens, count, output in rows:
                yield Timed(keys[start : start + count], tokens, label * seconds, output)
                start += count

    def timed_columns(self):
        """:meth:`timed`'s requests a batch at a time: ``(Columns, output lengths)`` (the compiled engine's,
        ``kvlab/simulator/compiled.py``; labels in units of :attr:`seconds`)."""
        return self._columns(outputs=True)

    def dense_columns(self):
        """``(Columns, output lengths)`` per batch, keys dense from 0 in order of first appearance (outputs: a list,
        Nones where the format has none): what ``kvlab trace convert`` writes."""
        from kvlab.workloads.dense import Interner

        interner = Interner()
        for columns, outputs in self._columns(outputs=True):
            yield columns._replace(keys=interner.dense(columns.keys)), outputs

    def _columns(self, outputs=False):
        """The trace's batches with the hash ids of this workload's blocks as keys (with ``outputs``: each with its
        requests' output lengths, a list, or Nones where the format has none)."""
        import numpy as np

        from kvlab.workloads.stream import Columns, group_blocks, split_blocks

        interner = None
        if self.split > 1:
            from kvlab.workloads.dense import Interner

            interner = Interner()
        read = 0
        try:
            for batch in self._read():
                if interner is not None:
                    self._check_pieces(batch.tokens, read)
                    ids, counts = split_blocks(
                        interner.dense(batch.ids), batch.counts, batch.tokens, self.split, self.block_tokens
                    )
                else:
                    ids, counts = group_blocks(batch.ids, batch.counts, self.group)
                self.read_fraction = batch.fraction
                read += len(counts)
                columns = Columns(np.zeros(len(counts), dtype=np.int64), batch.labels, batch.tokens, counts, ids)
                if outputs:
                    given = batch.outputs
                    yield columns, [None] * len(counts) if given is None else given.tolist()
                else:
                    yield columns
        except TraceError as error:
            raise WorkloadError(str(error)) from None

    def _check_pieces(self, tokens, read):
        """WorkloadError when a prompt of ``tokens`` (a batch's, after ``read`` requests) would be cut into more than
        :data:`MAX_ACCESSES` blocks of ``--block-tokens``: their keys would not fit in memory."""
        pieces = -(-tokens // self.block_tokens)
        if len(pieces) and pieces.max() > MAX_ACCESSES:
            index = int(pieces.argmax())
            raise WorkloadError(
                f"request {read + index + 1} of the trace: its prompt of {int(tokens[index])} tokens would be cut into"
                f" {int(pieces[index])} blocks of --block-tokens {self.block_tokens}, more than {MAX_ACCESSES}:"
                " give a larger --block-tokens"
            )


class MooncakeWorkload(TraceWorkload):
    """A Mooncake FAST'25 trace (timestamp in ms, input_length, output_length, hash_ids of 512-token blocks)."""

    name = "mooncake"
    format = FORMATS["mooncake"]


class BailianWorkload(TraceWorkload):
    """A Qwen-Bailian trace (Alibaba, USENIX ATC'25): chat_id, parent_chat_id, timestamp in seconds,
    input_length, output_length, type, turn, hash_ids of 16-token blocks."""

    name = "bailian"
    format = FORMATS["bailian"]


class RequestsWorkload(TraceWorkload):
    """The user's own trace of requests (``kvlab/workloads/requests.py``, docs/replay.md): JSONL or CSV with
    ``timestamp``, ``input_length``, ``output_length``, an optional ``request_id``, and ``prompt_token_ids`` (cut
    into blocks of ``--block-tokens``, their keys chained as vLLM's hashes) or ``hash_ids`` of
    ``--hash-block-tokens`` tokens, ``--hash-chaining chained`` or ``per-block`` (chained by kvlab)."""

    name = "requests"
    options = (
        *TraceWorkload.options,
        option(
            "timestamp_unit",
            str,
            "s",
            "the unit of a requests trace's timestamps: s (default), ms or us",
            tuple(TIMESTAMP_UNITS),
        ),
        option("hash_block_tokens", whole_number(0), 0, "the tokens of a requests trace's hash_ids blocks"),
        option(
            "hash_chaining",
            hash_chaining,
            "",
            "a requests trace's hash_ids: chained (each a hash of its prefix) or per-block (each of its own tokens;"
            " kvlab chains them)",
        ),
    )
    default_block_tokens = 16  # vLLM's default block size

    @property
    def unit_tokens(self):
        return self.hash_block_tokens or self.block_tokens

    @property
    def seconds(self):
        return TIMESTAMP_UNITS[self.timestamp_unit]

    def describe(self):
        described = {**super().describe(), "timestamp_unit": self.timestamp_unit}
        if self.hash_block_tokens:
            described |= {"hash_block_tokens": self.hash_block_tokens, "hash_chaining": self.hash_chaining}
        return described

    def request_ids(self):
        return getattr(self, "_ids", None)

    def _read(self):
        from kvlab.workloads.requests import RequestTrace, read_requests

        trace = RequestTrace(self.block_tokens, self.hash_block_tokens, self.hash_chaining)
        self._ids = []
        for batch, ids in read_requests(self.trace, trace):
            self._ids += ids
            yield batch


WORKLOADS = {
    source.name: source
    for source in (
        LabWorkload,
        LongDocQAWorkload,
        BenchMultiturnWorkload,
        MultiRoundQAWorkload,
        MooncakeWorkload,
        BailianWorkload,
        RequestsWorkload,
    )
}
