"""``kvlab check``: are the committed results what the committed code and config make? Every artifact is
regenerated in a scratch copy (work/check/) and compared byte for byte; each difference is one line naming the
file and the command that repairs it, every path quoted for the shell (exit 1). When results/ is up to date, one
line saying what was compared (exit 0)."""

from kvlab.cli.base import Outputs, Parser, run, summary


def build_parser(prog):
    return Parser(prog=prog, description=summary(__doc__))


def execute(args, parser):
    from kvlab.workflow.freshness import RESULTS, check

    try:
        lines, compared = check()
    except RuntimeError as error:
        raise ValueError(str(error)) from None
    if lines:
        return Outputs(stdout="".join(f"{line}\n" for line in lines), status=1)
    return Outputs(stdout=f"{ok(compared, RESULTS)}\n")


def ok(compared, results="results"):
    """The line of a check that found no difference."""
    artifacts = "artifact" if compared == 1 else "artifacts"
    verb = "matches" if compared == 1 else "match"
    return f"kvlab check: {compared} {artifacts} in {results}/ {verb} a regeneration from the committed code and config"


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
