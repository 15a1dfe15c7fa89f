"""``kvlab config``: check a config.yaml before Snakemake reads it: plain YAML data (no YTE templating, aliases
within a bound), finite numbers, the schema, and the cross-field rules. Silent when it is good."""

from kvlab.cli.base import Outputs, Parser, run


def build_parser(prog):
    parser = Parser(prog=prog, description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_input("config", nargs="?", default="config.yaml", help="the config file (default config.yaml)")
    return parser


def execute(args, parser):
    from kvlab.config import load, validate
    from kvlab.pipeline import check_config

    config, root = load(args.config)
    validate(config, root, args.config)
    check_config(config)
    return Outputs()


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
