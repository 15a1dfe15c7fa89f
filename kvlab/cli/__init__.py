"""The ``kvlab`` command: one entry point, a subcommand per tool, each imported only when it runs.

``kvlab COMMAND [flags]`` (or ``python -m kvlab COMMAND``); ``kvlab --help`` lists the commands and
``kvlab COMMAND --help`` their flags. Every command answers bad input with one line on stderr and exit
2 (usage) or 1 (bad data, I/O), and writes its output files together or not at all.
"""

import importlib
import os
import sys

__all__ = ["COMMANDS", "main"]

# name: (its module under kvlab.cli, whose main(argv, prog) runs it; one line of help)
COMMANDS = {
    "scenario": ("scenario", "the lab's scenario: documents read in passes through a GPU (+ CPU) LRU cache"),
    "summarize": ("summarize", "a TTFT measurement (JSONL) as per-pass medians, means and offload ratios"),
    "replay": ("replay", "a workload through a two-tier prefix cache of KV blocks: its reuse figures"),
    "simulate": ("simulate", "a workload through one engine instance on a clock: TTFT, TPOT, throughput under load"),
    "mrc": ("mrc", "the exact LRU curve of a tier at every room, and its cliffs"),
    "trace": ("trace", "a trace's figures (requests, blocks, reuse at unlimited room), or the trace in another format"),
    "plan": ("plan", "a CPU offload budget for a workload and a model: tokens per tier and GiB"),
    "serve": ("serve", "kvlab's planner in a local web page: a form, each tier's curve, a table per CPU budget"),
    "search": ("search", "the cheapest fleet that meets an SLO: instances, TP, tiers and routers, priced per hour"),
    "size": ("size", "a model's KV cache per GPU, layer group by layer group: bytes per token, GiB for a prompt"),
    "policies": ("policies", "the offload designs side by side: write x eviction policies over rooms"),
    "ttft": ("ttft", "the TTFT model: fit it to a measurement, price sweeps and CPU budgets"),
    "plots": ("plots", "a figure of results/plots/ drawn from artifacts"),
    "collect": ("collect", "fold a lab sweep's scenario outputs into one artifact"),
    "replay-table": ("replay_table", "fold replay outputs into one CSV table"),
    "measure": ("measure", "measure TTFT on a real OpenAI-compatible server: the lab's passes, one record per request"),
    "example-measurement": ("example", "write the SYNTHETIC example TTFT measurement"),
    "config": ("config", "check a config.yaml (safe YAML, schema, cross-field rules) before a run"),
    "check": ("check", "are the committed results what the code and config make? (a full regeneration)"),
    "run": ("run", "the whole pipeline (Snakemake), one run at a time per folder, recovering a killed one"),
}


def usage():
    width = max(map(len, COMMANDS))
    lines = ["usage: kvlab COMMAND [flags]   (kvlab COMMAND --help for its flags)", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_text}" for name, (_, help_text) in COMMANDS.items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    """Run one command; return its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        sys.stderr.write(usage())
        return 2
    if argv[0] in ("-h", "--help"):
        from kvlab.cli.base import emit

        return 0 if emit(usage()) else 1
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        shown = name if len(name) <= 40 else name[:35] + "..."
        sys.stderr.write(f"kvlab: error: unknown command {shown!r} (commands: {', '.join(COMMANDS)})\n")
        return 2
    module = importlib.import_module(f"kvlab.cli.{COMMANDS[name][0]}")
    return module.main(rest, f"kvlab {name}")


# What a kvlab process sets in its environment unless it is already set (before numpy loads; Snakemake's jobs and the
# servers a command starts inherit it). Measured on this project's 2-core VM, kvlab simulate on the conversation
# trace with a CPU tier, runs in turns:
# - NUMPY_MADVISE_HUGEPAGE=0: numpy asks the kernel for transparent huge pages for every array of 4 MiB or more (on
#   by default on Linux). A kvlab command is a short process that touches its memory once, and there a huge page's
#   fault (2 MiB zeroed, memory compacted for it) costs more than the 512 small faults it saves: 0.38-0.77 s of system
#   time with them, 0.15-0.20 s without (user time the same).
# - OPENBLAS_NUM_THREADS=1: numpy's and scipy's OpenBLAS (scipy loaded by numba's BLAS check) each start a thread
#   per core that spins as it starts; kvlab's linear algebra is a few small fits. 1.02-1.14 s of user time with
#   them, 0.84-0.90 s without; `import numba, scipy.linalg.cython_blas` alone 0.47 s against 0.28 s.
# Set a variable yourself to have the libraries' default back.
PROCESS_DEFAULTS = {"NUMPY_MADVISE_HUGEPAGE": "0", "OPENBLAS_NUM_THREADS": "1"}


def process_defaults(environ=os.environ):
    """Set :data:`PROCESS_DEFAULTS` in ``environ`` where it does not set them already."""
    for name, value in PROCESS_DEFAULTS.items():
        environ.setdefault(name, value)


def entry():
    """The console script: exit with the command's code."""
    process_defaults()  # before any numpy import
    from kvlab.util.kernels import writable_cache

    writable_cache()  # before numba is imported
    sys.exit(main())
