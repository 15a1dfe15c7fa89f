"""Replay the lab's long-document scenario through the cache simulator and print one JSON document.

Documents ``0 .. docs-1`` of ``tokens`` tokens each are read pass after pass (``fwd``: upward,
``rev``: downward) through one :class:`TwoTierCache` that is never cleared between passes.
With ``--cpu 0`` (the default) that is the single-tier LRU cache of the lab's step 2.
``--write-policy`` picks another offload design (write-back, selective; ``kvsim.py``).

Standard library only; runs as ``python kvlab/scenario.py`` from the repository root and as
``python3 scenario.py`` when copied alone next to ``kvsim.py``.
"""

import argparse
import json
import sys

if __package__:
    from .kvsim import TWO_TIER_CACHES
else:
    from kvsim import TWO_TIER_CACHES

ORDERS = ("fwd", "rev")
MAX_READS = 10**8  # documents read over all passes: more is refused, not left to run for hours
MAX_WHOLE = 2**53  # any room or length: exact as a float, so every tool reads it back the same


class Once(argparse.Action):
    """A flag that may be given once: a second value is an error, not a silent override."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = vars(namespace).setdefault("_given", set())
        if option_string is not None and self.dest in given:
            parser.error(f"argument {option_string}: given twice")
        given.add(self.dest)
        setattr(namespace, self.dest, values)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are a single line on stderr (exit 2), without the usage block; a flag
    is spelled in full (no abbreviations) and given at most once."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.register("action", None, Once)
        self.register("action", "store", Once)

    def error(self, message):
        self.fail(message, status=2)

    def print_help(self, file=None):
        """As argparse's, but a help that cannot be written is exit 1 and one line (argparse ignores the error)."""
        if file is not None:
            return super().print_help(file)
        try:
            sys.stdout.write(self.format_help())
            sys.stdout.flush()
        except (OSError, AttributeError, ValueError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else "it is closed"
            self.fail(f"standard output: cannot write: {reason}")

    def fail(self, message, status=1):
        """Exit with ``status`` and one error line (also for bad input found after the arguments parsed)."""
        one_line = message.replace("\n", "\\n")  # a bad argument or file name may itself contain a newline
        self.exit(status, f"{self.prog}: error: {one_line}\n")


def non_negative_int(text):
    """argparse type: a whole number from 0 to MAX_WHOLE."""
    shown = repr(text) if len(text) <= 40 else repr(text[:32]) + "..."
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not (digits.isascii() and digits.isdigit()):  # int() would also take 1_000, ١٢٣ and spaces
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {shown}")
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {shown}")
    if value > MAX_WHOLE:
        raise argparse.ArgumentTypeError(f"expected a whole number <= {MAX_WHOLE}, got {shown}")
    return value


def pass_list(text):
    """argparse type: a comma-separated list of ``fwd``/``rev``."""
    orders = text.split(",")
    bad = [order for order in orders if order not in ORDERS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of fwd/rev, got {text!r} (bad: {', '.join(map(repr, bad))})"
        )
    return orders


def build_parser(prog="scenario.py"):
    parser = OneLineParser(
        prog=prog,
        description="Read documents in passes through a GPU (+ optional CPU) LRU cache; print one JSON document.",
    )
    parser.add_argument("--gpu", type=non_negative_int, default=21520, help="GPU room in tokens (default 21520)")
    parser.add_argument(
        "--cpu", type=non_negative_int, default=0, help="CPU room in tokens; 0 = no CPU tier (default 0)"
    )
    parser.add_argument("--docs", type=non_negative_int, default=10, help="number of documents (default 10)")
    parser.add_argument("--tokens", type=non_negative_int, default=5011, help="tokens per document (default 5011)")
    parser.add_argument(
        "--passes",
        type=pass_list,
        default=["fwd", "fwd", "rev"],
        help="comma-separated fwd/rev passes (default fwd,fwd,rev)",
    )
    parser.add_argument(
        "--write-policy",
        choices=TWO_TIER_CACHES,
        default="write-through",
        help="how the CPU tier is filled: write-through (default, the lab's), write-back or selective",
    )
    return parser


def run(gpu, cpu, docs, tokens, passes, write_policy="write-through"):
    """Return the scenario's result: one counts object per pass, in pass order."""
    cache = TWO_TIER_CACHES[write_policy](gpu, cpu)
    results = []
    for order in passes:
        doc_order = range(docs) if order == "fwd" else range(docs - 1, -1, -1)
        counts = {"gpu": 0, "cpu": 0, "miss": 0}
        hit_docs = []
        for doc in doc_order:
            tier = cache.access(doc, tokens)
            counts[tier] += 1
            if tier != "miss":
                hit_docs.append(doc)
        results.append(
            {
                "order": order,
                "gpu_hits": counts["gpu"],
                "cpu_hits": counts["cpu"],
                "misses": counts["miss"],
                "hit_docs": hit_docs,
            }
        )
    return {"passes": results}


def parse(argv=None, prog="scenario.py"):
    """The parsed arguments; a setting that would read more than MAX_READS documents is a usage error."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.docs * len(args.passes) > MAX_READS:
        parser.error(f"--docs {args.docs} x {len(args.passes)} passes reads more than {MAX_READS} documents")
    return args


def main(argv=None):
    args = parse(argv)
    result = run(args.gpu, args.cpu, args.docs, args.tokens, args.passes, args.write_policy)
    try:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        sys.stdout.flush()
    except (OSError, AttributeError):  # standard output closed or full: nothing more to say
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
