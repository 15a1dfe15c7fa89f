"""``kvlab search``: the cheapest fleet that meets an SLO: a search over GPU systems, engines, TP, instances (or
prefill apart from decode), CPU budgets, CPU scopes and routers, each priced per hour, pruned by bounds and simulated
cheapest first (kvlab.search); the winner with its plan, the frontier of cost against the SLO's first metric, and
whether offloading helps."""

import dataclasses
import sys

from kvlab.api import searches
from kvlab.cli.base import Outputs, Parser, add_arguments, run, summary
from kvlab.cli.flags import (
    FormatSettings,
    add_hardware_arguments,
    add_memory_argument,
    add_workload_arguments,
    workload_options,
)
from kvlab.latency.transfer import DISK_HARDWARE
from kvlab.simulator.arrivals import Arrivals
from kvlab.simulator.settings import EngineSettings
from kvlab.util.settings import setting


@dataclasses.dataclass
class SearchModel:
    model_config: str = setting(help="the model's Hugging Face config.json", file="input", metavar="FILE")


@dataclasses.dataclass
class FanOut:
    """The pipeline's fan-out (rules/search.smk): the candidates, one simulation, then the answer from them all."""

    candidates: bool = setting(
        False,
        switch="on",
        help="print the configurations the search would simulate (after its bounds), one per line, cheapest first,"
        " and stop",
    )
    evaluate: str | None = setting(
        None,
        help="simulate this one of --candidates' configurations (its line) into --evaluations, and stop",
        metavar="CONFIGURATION",
    )
    from_evaluations: bool = setting(
        False,
        switch="on",
        help="answer from what --evaluations keeps, simulating nothing (a configuration it lacks is an error)",
    )


FAN_OUT = {"--candidates": "candidates", "--evaluate": "evaluate", "--from-evaluations": "from_evaluations"}
SPACE = tuple(found.name for found in dataclasses.fields(searches.SearchSpace))
ENGINE = tuple(f.name for f in dataclasses.fields(EngineSettings) if f.name not in searches.ENGINE_OWN)


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    add_workload_arguments(parser)
    add_arguments(parser, SearchModel, title="model")
    add_arguments(parser, searches.SearchSpace, title="the space and the SLO (kvlab/api/searches.py)")
    add_arguments(parser, Arrivals, title="arrivals (one of; default: the trace's clock)")
    add_arguments(parser, EngineSettings, skip=searches.ENGINE_OWN, title="engine (kvlab/simulator/settings.py)")
    add_hardware_arguments(parser, skip=(*searches.HARDWARE_OWN, *DISK_HARDWARE))
    add_arguments(parser, FormatSettings)
    add_arguments(parser, FanOut, title="fan-out (the pipeline's search rule)")
    add_memory_argument(parser)
    return parser


def settings_of(args):
    """kvlab.search's keywords from the flags."""
    from kvlab.latency.hardware import settings_names

    names = (*SPACE, *(f.name for f in dataclasses.fields(Arrivals)), *ENGINE, *settings_names(), "max_memory")
    given = {name: getattr(args, name) for name in names if hasattr(args, name)}
    given = {name: value for name, value in given.items() if value is not None}
    return {"workload": args.workload, **workload_options(args), "model_config": args.model_config, **given}


def prepare(args):
    """``kvlab config``'s check of a job's flags: every setting checked as :func:`execute` checks it, nothing run."""
    searches.search(**settings_of(args), dry_run=True)


def execute(args, parser):
    steps = [flag for flag, given in FAN_OUT.items() if getattr(args, given) not in (None, False)]
    if len(steps) > 1:
        parser.error(f"argument {steps[1]}: not allowed with argument {steps[0]}")
    if steps and steps[0] != "--from-evaluations" and args.format != "json":
        parser.error(f"argument --format: {steps[0]} prints no answer to show as a table")
    settings = settings_of(args)
    if args.candidates:
        return Outputs(stdout="".join(f"{line}\n" for line in searches.candidates(**settings)))
    if args.evaluate is not None:
        searches.evaluate(args.evaluate, **settings)
        return Outputs(stdout="")
    result = searches.search(**settings, simulate=not args.from_evaluations)
    sys.stderr.write(f"{parser.prog}: note: {result.simulated:,} simulated, {result.kept:,} read from those kept\n")
    return Outputs(stdout=result.text if args.format == "json" else searches.table(result.to_dict()))


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
