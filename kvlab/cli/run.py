"""``kvlab run``: the whole pipeline, as ``make run`` runs it: every config Snakemake will read (config.yaml, each
``--configfile``, each ``--config`` override, merged as Snakemake merges them) checked as data first, one run at
a time in a folder (a second stops with one line naming the first), and a clean start after a killed run (its
locks and temporary files removed, its incomplete jobs rerun). Flags after ``--`` go to Snakemake."""

import argparse
from dataclasses import dataclass

from kvlab.cli.base import Outputs, Parser, UsageError, add_arguments, run, summary
from kvlab.util.settings import setting


@dataclass
class RunSettings:
    config: str = setting(
        None,
        help="a config file whose values override config.yaml's (Snakemake's --configfile); default: config.yaml alone",
        file="input",
    )
    snakemake: list = setting(None, help="Snakemake's own flags, after --", positional=True, nargs=argparse.REMAINDER)


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    add_arguments(parser, RunSettings)
    return parser


def execute(args, parser):
    from kvlab.cli.config import check_sources
    from kvlab.workflow.runs import RunError, run_pipeline, snakemake_sources

    extra = args.snakemake[1:] if args.snakemake[:1] == ["--"] else args.snakemake
    if args.config is not None:
        if any(arg.startswith("--configf") for arg in extra):
            raise UsageError("--config and Snakemake's --configfile: give the config files one way")
        extra = [f"--configfile={args.config}", *extra]

    def check():
        sources = snakemake_sources(extra)
        if sources:
            check_sources(sources)

    try:
        code = run_pipeline(extra, check=check)
    except RunError as error:
        raise ValueError(str(error)) from None
    return Outputs(status=code)


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
