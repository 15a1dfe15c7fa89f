"""``kvlab config``: check a config.yaml before Snakemake reads it: plain YAML data (no YTE templating, aliases
within a bound), finite numbers, the schema, the cross-field rules, its inputs, its size, and every job's command
line as the job's own command parses it. Silent when it is good."""

from dataclasses import dataclass

from kvlab.cli.base import Outputs, Parser, add_arguments, run, summary
from kvlab.util.settings import setting


@dataclass
class ConfigSettings:
    config: str = setting(
        "config.yaml", help="the config file (default config.yaml)", file="input", positional=True, nargs="?"
    )


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    add_arguments(parser, ConfigSettings)
    return parser


def check(path):
    """The config in ``path``, checked: ValueError (one line) for the first problem."""
    from kvlab.workflow.config import load

    config, root = load(path)  # a config that is not a mapping: the schema says so, naming the line
    return check_sources([(path, config, root)])


def has_key(config, key):
    for part in key:
        if isinstance(config, dict) and part in config:
            config = config[part]
        elif isinstance(config, list) and isinstance(part, int) and part < len(config):
            config = config[part]
        else:
            return False
    return True


def check_sources(sources):
    """The config Snakemake makes of ``sources`` (``(name, data, composed root or None)``, each overriding those
    before it, merged as Snakemake's ``update_config`` merges them), checked as one; a problem names the source
    that gave the key. ValueError (one line) for the first problem; the config when it is good."""
    from kvlab.workflow.checks import ConfigError, check_config
    from kvlab.workflow.config import located, validate

    name, config, root = sources[0]
    if len(sources) > 1:
        import copy

        from snakemake.utils import update_config

        config = copy.deepcopy(config)
        for _, data, _ in sources[1:]:
            update_config(config, data)

    def where(key):
        for part in range(len(key), -1, -1):  # the last source that gives the key, or its deepest parent
            for source, data, node in reversed(sources):
                if has_key(data, key[:part]):
                    return located(node, source)(key[:part])
        return str(name)

    validate(config, where=where)
    try:
        check_config(config)
        check_jobs(config)
    except ConfigError as error:  # its messages say "config: KEY: ..."
        key = getattr(error, "key", ())
        place = where(key) if key else " with ".join(str(source) for source, _, _ in sources)
        raise ConfigError(f"{place}: {str(error).removeprefix('config: ')}") from None
    return config


def check_jobs(config):
    """Every job's command line (:func:`kvlab.workflow.commands.job_lines`) as its own command parses it:
    ConfigError naming the config key for the first that the command refuses. The files a rule adds are not in
    these lines, so an error that only says a file argument is missing is not one."""
    import shlex

    from kvlab.workflow.checks import ConfigError
    from kvlab.workflow.commands import TWO_WORDS, job_lines

    parsers = {}
    for key, line in job_lines(config):
        argv = shlex.split(line)
        problem = refusal(parsers, argv)
        if problem is not None:
            shown = " ".join(argv[:2] if argv[0] in TWO_WORDS else argv[:1])
            raise ConfigError(f"config: {'.'.join(map(str, key))}: kvlab {shown} refuses it: {problem}", key)


REQUIRED = "the following arguments are required"


def refusal(parsers, argv):
    """The one-line error of ``kvlab ARGV``'s parser, or None when it takes the flags (missing files aside)."""
    import contextlib
    import importlib
    import io

    from kvlab.cli import COMMANDS
    from kvlab.cli.base import UsageError

    name, rest = argv[0], argv[1:]
    module = importlib.import_module(f"kvlab.cli.{COMMANDS[name][0]}")
    if not hasattr(module, "build_parser"):  # a lab script's own parser (kvlab scenario), which its wrapper runs
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                module.parse(rest, f"kvlab {name}")
        except SystemExit:
            message = errors.getvalue().strip().splitlines()
            return message[-1].partition("error: ")[2] if message else "refused"
        return None
    if name not in parsers:
        parsers[name] = module.build_parser(f"kvlab {name}")
    try:
        args = parsers[name].parse_args(rest)
    except UsageError as error:
        return None if str(error).startswith(REQUIRED) else str(error)
    except SystemExit:  # a --help in a value: not a config of kvlab's
        return "not a command line"
    try:
        prepared(module, args)
    except ValueError as error:  # kvlab's errors, a memory limit: the line the job would stop with
        return str(error)
    return None


def prepared(module, args):
    """What the job does with its flags before any work, done the job's way: its workload made (the source's own
    checks: its size, its blocks) at each of its blocks, and the command's own ``prepare`` where it has one
    (``kvlab simulate``'s: the engine's memory rule, the pool and the tiers)."""
    from kvlab.cli.flags import make_workload

    if getattr(args, "workload", None) is not None:
        blocks = getattr(args, "block_tokens", None) or getattr(args, "chunk_tokens", None)
        for block in blocks if isinstance(blocks, list) else [blocks]:
            make_workload(args, block)
    if hasattr(module, "prepare"):
        module.prepare(args)


def execute(args, parser):
    check(args.config)
    return Outputs()


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
