"""``kvlab check``: are the committed results what the committed code and config make? Every artifact is
regenerated in a scratch copy (work/check/) and compared byte for byte; each difference is one line naming the
file and the command that repairs it (exit 1). Silent, exit 0, when results/ is up to date."""

from kvlab.cli.base import Outputs, Parser, run, summary


def build_parser(prog):
    return Parser(prog=prog, description=summary(__doc__))


def execute(args, parser):
    from kvlab.freshness import differences

    try:
        lines = differences()
    except RuntimeError as error:
        raise ValueError(str(error)) from None
    return Outputs(stdout="".join(f"{line}\n" for line in lines), status=1 if lines else 0)


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
