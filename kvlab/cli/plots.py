"""``kvlab plots``: one figure of results/plots/ drawn from artifacts, byte for byte the same every run."""

from dataclasses import dataclass

from kvlab.cli.base import Outputs, Parser, UsageError, add_arguments, run, summary
from kvlab.util.settings import setting

NAMES = (  # kvlab.report.plots.PLOTS's keys (a test checks), without importing matplotlib for --help
    "gpu_cliff",
    "cpu_cliff",
    "mrc",
    "ttft_per_pass",
    "predicted_vs_measured",
    "ttft_budgets",
    "ttft_hardware_lab",
    "ttft_hardware_budgets",
    "simulate_ttft_budgets",
    "simulate_ttft_load",
    "real_ttft_per_pass",
    "real_predicted_vs_measured",
    "trace_reuse",
)


@dataclass
class PlotSettings:
    plot: str = setting(help="the figure to draw", choices=NAMES, positional=True)
    out: str = setting(help="the PNG file to write", file="output")
    inputs: list = setting(help="the artifacts the plot reads", file="input", positional=True, nargs="+")
    note: str = setting(None, help="a line under the figure (where its data come from)")


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    add_arguments(parser, PlotSettings)
    return parser


def execute(args, parser):
    import inspect

    from kvlab.report.plots import PLOTS, draw

    takes = inspect.signature(PLOTS[args.plot]).parameters.values()
    named = [parameter for parameter in takes if parameter.kind is parameter.POSITIONAL_OR_KEYWORD]
    more = [parameter for parameter in takes if parameter.kind is parameter.VAR_POSITIONAL]  # as many as given
    if (len(args.inputs) < len(named)) if more else (len(args.inputs) != len(named)):
        names = [parameter.name.upper() for parameter in named] + [f"[{extra.name.upper()}...]" for extra in more]
        count = f"at least {len(named)}" if more else f"{len(named)}"
        raise UsageError(f"{args.plot} reads {count} input(s) ({' '.join(names)}), got {len(args.inputs)}")
    return Outputs({args.out: draw(args.plot, args.inputs, args.note)})


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
