"""What every command shares: a parser whose errors are one line, argument types, and the one ending that
writes a command's outputs together (or none of them) and turns any error into one line and an exit code.

Exit codes: 0 done; 2 a usage error (a flag, a setting, an output that is also an input); 1 bad data or I/O.
"""

import argparse
import errno
import os
import re
import stat
import sys
from dataclasses import MISSING, dataclass, field, fields

from kvlab.util.errors import SettingError, describe
from kvlab.util.files import shown, write_together
from kvlab.util.settings import InputPath, flag, listing

__all__ = [
    "Outputs",
    "Parser",
    "add_arguments",
    "UsageError",
    "argument",
    "deprecated",
    "input_file",
    "listing",
    "one_of",
    "run",
    "summary",
]


class UsageError(Exception):
    """A usage error found after parsing (a bad combination of flags); exit 2."""


class Once(argparse.Action):
    """A flag that stores its value and may be given once: a second value is an error, not a silent override (the
    rule of every command, and of the lab's scenario script, which keeps its own copy: it is standard-library only
    and stands alone)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = vars(namespace).setdefault("_given", set())
        if option_string is not None and self.dest in given:
            parser.error(f"argument {option_string}: given twice")
        given.add(self.dest)
        setattr(namespace, self.dest, values)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (raised as UsageError, so a caller in-process gets them
    too), and which knows which of its arguments name input and output files."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # --gpu must not quietly mean --gpu-tokens
        super().__init__(*args, **kwargs)
        self.register("action", None, Once)  # a flag given twice is an error, not a silent override
        self.register("action", "store", Once)
        self.outputs = []
        self.renamed = {}  # a deprecated spelling -> its new one (:func:`deprecated`)
        self.declared = []  # (flag or positional name, its declared field): what :func:`add_arguments` made, in order
        self.groups = {}  # argument groups by title (:meth:`group`)
        self.subcommands = {}  # name -> its parser (:meth:`subcommand`)
        self._commands = None

    def parse_known_args(self, args=None, namespace=None):
        """As argparse's, but a deprecated spelling (:func:`deprecated`) is said on stderr and read as its new one."""
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(respelled(self.renamed, args) if self.renamed else args, namespace)

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an unknown flag after a subcommand is reported by that subcommand."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            getattr(parsed, "parser", self).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def print_help(self, file=None):
        """As argparse's, but a help that cannot be written is exit 1 and one line (argparse ignores the error)."""
        if file is not None:
            return super().print_help(file)
        if not emit(self.format_help(), self.prog):
            raise SystemExit(1)

    def error(self, message):
        error = UsageError(message)
        error.prog = self.prog
        raise error

    def subcommand(self, name, help):
        """A subcommand's own parser (``kvlab ttft fit``), which the parsed arguments name (``args.parser``)."""
        if self._commands is None:
            self._commands = self.add_subparsers(dest="command", required=True, parser_class=Parser)
        child = self._commands.add_parser(name, help=help)
        child.set_defaults(parser=child)
        self.subcommands[name] = child
        return child

    def group(self, title):
        """The argument group ``title`` (made on first use); the parser itself for None."""
        if title is None:
            return self
        if title not in self.groups:
            self.groups[title] = self.add_argument_group(title)
        return self.groups[title]

    def files(self, args, dests):
        found = []
        for dest in dests:
            value = getattr(args, dest, None)
            found += [] if value is None else value if isinstance(value, list) else [value]
        return found


@dataclass
class Outputs:
    """What a command hands back: files to write together, and text for standard output (after them)."""

    files: dict = field(default_factory=dict)
    stdout: str | bytes | None = None
    status: int = 0  # the exit code when all went well (a command that runs another program passes its code on)


def argument(convert):
    """An argparse type from a converter that raises ValueError with its own message."""

    def parse(given):
        try:
            return convert(given)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = getattr(convert, "__name__", "value")
    return parse


def add_arguments(parser, settings, skip=(), optional=False, helps=None, grid=False, defaults=None, title=None):
    """The arguments of every declared field of the dataclass ``settings`` (kvlab/util/settings.py) but ``skip``, in
    the :class:`Parser` ``parser``: in the argument group ``title``, else in the one its declaration names (each made
    once per parser), else in the parser; a field without a default is required unless ``optional``; ``helps`` and
    ``defaults`` replace an argument's help and default; with ``grid``, a field the declaration marks takes a
    comma-separated list. The one place an argument of a command is made: each is recorded, with its field, in
    ``parser.declared``."""
    exclusive = {}
    for found in fields(settings):
        name, metadata = found.name, found.metadata
        if name in skip or not metadata:
            continue
        target = parser.group(title or metadata["group"])
        if metadata["exclusive"] is not None:
            key, required = metadata["exclusive"]
            if key not in exclusive:
                exclusive[key] = target.add_mutually_exclusive_group(required=required and not optional)
            target = exclusive[key]
        help_text = (helps or {}).get(name, metadata["help"])
        spelled = name if metadata["positional"] else flag(name, metadata)
        parser.declared.append((spelled, found))
        if metadata["switch"] == "on":
            target.add_argument(spelled, action="store_true", help=help_text)
            continue
        if metadata["switch"] == "both":
            target.add_argument(spelled, action=argparse.BooleanOptionalAction, default=found.default, help=help_text)
            continue
        missing = found.default is MISSING
        default = (defaults or {}).get(name, None if missing else found.default)
        options = {"default": default, "help": help_text, "nargs": metadata["nargs"], "type": converter(metadata, grid)}
        if metadata["choices"] is not None:
            options["choices"] = metadata["choices"]
        if metadata["metavar"] or not (metadata["choices"] or metadata["positional"]):
            options["metavar"] = metadata["metavar"] or name.upper()
        if metadata["repeat"]:
            options["action"] = "append"
        if metadata["const"] is not None:
            options["const"] = metadata["const"]
        if metadata["positional"]:
            action = target.add_argument(spelled, **options)
        else:
            required = missing and not optional and metadata["exclusive"] is None
            action = target.add_argument(spelled, dest=name, required=required, **options)
        if metadata["file"] == "output":
            parser.outputs.append(action.dest)
        if metadata["renamed"] is not None:
            deprecated(parser, metadata["renamed"], spelled)


def converter(metadata, grid):
    """The argparse type of a declared field: its file's, its grid's or its converter's (None: the text as given)."""
    if metadata["nargs"] == argparse.REMAINDER:
        return None
    if metadata["file"] is not None:
        return input_file if metadata["file"] == "input" else output_file
    convert = metadata["convert"]
    if convert is None:
        return None
    return argument(listing(convert, metadata["grid"]) if grid and metadata["grid"] else convert)


def input_file(given):
    """The type of every argument naming a file the command reads (``-``: standard input). An empty name is no
    file."""
    if not given:
        raise argparse.ArgumentTypeError("an empty path names no file")
    return InputPath(given)


def output_file(text):
    """The type of an argument naming a file the command writes: an empty name is no file (the rename of a
    finished output over the working folder would fail, its temporary file left beside it), and one ending in
    ``/`` (or ``/.``) is a folder (a rename would write the file before it)."""
    if text and os.path.basename(text) in ("", ".", ".."):
        raise argparse.ArgumentTypeError(f"{text}: names a folder, not a file")
    return str(input_file(text))


def summary(doc):
    """A command's ``--help`` description from its module docstring: the first paragraph, as plain text."""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    return re.sub(r"^``kvlab [a-z -]+``: ", "", paragraph).replace("``", "")


def one_of(valid, what):
    """A converter accepting only the names of ``valid``; the error lists them."""

    def convert(name):
        if name not in valid:
            raise ValueError(f"{shown(name)} is not a {what} (valid: {', '.join(valid)})")
        return name

    return convert


def deprecated(parser, old, new):
    """``old``, the former spelling of ``new`` (a flag of ``parser``, or a flag and one of its values, ``"--vary
    gpu"``), kept for one release: hidden from --help, it says ``kvlab: OLD is deprecated; use NEW`` once on stderr,
    then works as ``new`` (its errors, a flag given twice, a required flag, name ``new``)."""
    parser.renamed[old] = new


def respelled(renamed, args):
    """``args`` with every deprecated spelling replaced by its new one (``--old=VALUE`` too), each said once on
    stderr; what follows ``--`` is left alone."""
    args, said, index = list(args), set(), 0
    while index < len(args) and args[index] != "--":
        name, equals, value = args[index].partition("=")
        pair = f"{name} {value if equals else args[index + 1] if index + 1 < len(args) else ''}"
        old = name if name in renamed else pair if pair in renamed else None
        if old is not None:
            new = renamed[old]
            if old not in said:
                said.add(old)
                sys.stderr.write(f"kvlab: {old} is deprecated; use {new}\n")
            flag, _, choice = new.partition(" ")
            if not choice:
                args[index] = flag + equals + value
            elif equals:
                args[index] = f"{flag}={choice}"
            else:
                args[index : index + 2] = [flag, choice]
        index += 2 if " " in (old or "") and not equals else 1
    return args


def identity(path):
    """``(device, inode)`` of the file ``path`` names (``-``: standard input's), or None."""
    try:
        status = os.fstat(sys.stdin.fileno()) if path == "-" else os.stat(path)
    except (OSError, ValueError, AttributeError):
        return None
    if stat.S_ISCHR(status.st_mode):  # a terminal, /dev/null: read and written at once without harm
        return None
    return status.st_dev, status.st_ino


def same_file(first, second):
    """Whether two paths name one file (the same path, one file through links, or ``-`` and a name of standard
    input's file such as /dev/stdin)."""
    if first == second == "-":
        return True
    if "-" not in (first, second) and os.path.abspath(first) == os.path.abspath(second):
        return True
    found = identity(first)
    return found is not None and found == identity(second)


def check_paths(parser, args):
    """Refuse an output that is also an input, or two outputs in one file: either would clobber a file; and an
    output in a folder that does not exist, before any work."""
    outputs = parser.files(args, parser.outputs)
    inputs = [path for path in parser.files(args, vars(args)) if isinstance(path, InputPath)]
    for output in outputs:
        if not os.path.isdir(os.path.dirname(os.path.abspath(output))):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), output)
    for index, output in enumerate(outputs):
        for path in inputs:
            if same_file(output, path):
                raise UsageError(f"{output} is both an input and an output")
        for other in outputs[:index]:
            if same_file(output, other):
                raise UsageError(f"{output} is named as two outputs")


def one_line(text):
    return str(text).replace("\n", "\\n").replace("\r", "\\r")


def fail(prog, message, status):
    sys.stderr.write(f"{prog}: error: {one_line(message)}\n")
    return status


def emit(text, prog="kvlab"):
    """Write the command's standard output; False when it cannot (closed, full), said in one line on stderr as
    any output that cannot be written is, unless the reader has gone (a broken pipe: ``kvlab ... | head``)."""
    stream = sys.stdout
    try:
        if isinstance(text, bytes):
            stream.buffer.write(text)
        else:
            stream.write(text)
        stream.flush()
    except (OSError, AttributeError, ValueError) as error:
        if not isinstance(error, BrokenPipeError):
            reason = error.strerror if isinstance(error, OSError) and error.strerror else "it is closed"
            fail(prog, f"standard output: cannot write: {reason}", 1)
        try:  # so that Python's own flush at exit does not report the same failure
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        except (OSError, AttributeError, ValueError):
            pass
        return False
    return True


def exit_code(call):
    """``call()``'s result, or the code of the SystemExit it raised (the lab scripts' parsers exit)."""
    try:
        return call()
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 1


ERRORS = (ValueError, OSError, ArithmeticError, RecursionError, MemoryError, LookupError, TypeError)


def run(build, execute, argv, prog):
    """Parse ``argv`` with ``build(prog)``, run ``execute(args, parser)`` (which returns :class:`Outputs`),
    write its outputs; return the exit code. Every error is one line on stderr."""
    parser = command = build(prog)
    outputs = []
    try:
        args = parser.parse_args(argv)
        command = getattr(args, "parser", parser)  # a subcommand's own parser, when there are subcommands
        outputs = command.files(args, command.outputs)
        check_paths(command, args)
        result = execute(args, command)
        write_together(result.files)
    except (UsageError, SettingError) as error:  # SettingError: a setting kvlab's functions refuse (kvlab.api)
        return fail(getattr(error, "prog", None) or command.prog, error, 2)
    except SystemExit as done:  # --help
        return done.code if isinstance(done.code, int) else 0
    except KeyboardInterrupt:
        return fail(command.prog, "interrupted", 130)
    except ERRORS as error:
        return fail(command.prog, describe(error, outputs), 1)
    if result.stdout is not None and not emit(result.stdout, command.prog):
        return 1
    return result.status
