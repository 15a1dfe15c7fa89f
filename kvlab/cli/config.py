"""``kvlab config``: check a config.yaml before Snakemake reads it: plain YAML data (no YTE templating, aliases
within a bound), finite numbers, the schema, and the cross-field rules. Silent when it is good."""

from kvlab.cli.base import Outputs, Parser, run, summary


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    parser.add_input("config", nargs="?", default="config.yaml", help="the config file (default config.yaml)")
    return parser


def check(path):
    """The config in ``path``, checked: ValueError (one line) for the first problem."""
    from kvlab.config import load, validate
    from kvlab.pipeline import ConfigError, check_config

    config, root = load(path)
    validate(config, root, path)
    try:
        check_config(config)
    except ConfigError as error:  # its messages say "config: KEY: ..."
        raise ConfigError(f"{path}: {str(error).removeprefix('config: ')}") from None
    return config


def execute(args, parser):
    check(args.config)
    return Outputs()


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
