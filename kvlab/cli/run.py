"""``kvlab run``: the whole pipeline, as ``make run`` runs it: config.yaml checked as data first, one run at a time
in a folder (a second stops with one line naming the first), and a clean start after a killed run (its locks and
temporary files removed, its incomplete jobs rerun). Flags after ``--`` go to Snakemake."""

import argparse

from kvlab.cli.base import Outputs, Parser, run, summary


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    parser.add_argument("--config", default="config.yaml", help="the config file to check first (default config.yaml)")
    parser.add_argument("snakemake", nargs=argparse.REMAINDER, help="Snakemake's own flags, after --")
    return parser


def execute(args, parser):
    from kvlab.cli.config import check
    from kvlab.runs import RunError, run_pipeline

    check(args.config)
    extra = args.snakemake[1:] if args.snakemake[:1] == ["--"] else args.snakemake
    try:
        code = run_pipeline(extra)
    except RunError as error:
        raise ValueError(str(error)) from None
    return Outputs(status=code)


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
