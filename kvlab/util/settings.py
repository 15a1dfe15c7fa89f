"""Settings declared once. A field of a settings dataclass made by :func:`setting` carries what its flag needs (help,
converter, choices); the commands' one builder (kvlab/cli/base.py ``add_arguments``) makes their flags from the
fields, and :class:`Declared` checks every value given to the Python API as the flag checks it, in argparse's words
(``argument --name: ...``), raised as a SettingError. The flag is the field's name with dashes, the keyword and the
config and JSON keys are its name. vidur's config dataclasses (``vidur/config/config.py``, ``flat_dataclass.py``) are
the model."""

import numbers
import os
from dataclasses import MISSING, field, fields
from decimal import Decimal

from kvlab.util.errors import SettingError
from kvlab.util.files import shown
from kvlab.util.numbers import MAX_POINTS, too_many_points

__all__ = [
    "Declared",
    "InputPath",
    "check_value",
    "checked",
    "flag",
    "listing",
    "nonempty_text",
    "name_or_file",
    "setting",
    "text",
]


def setting(
    default=MISSING,
    *,
    help,
    convert=None,
    choices=None,
    switch=None,
    group=None,
    exclusive=None,
    grid=None,
    renamed=None,
    metavar=None,
    option=None,
    file=None,
    positional=False,
    nargs=None,
    repeat=False,
    const=None,
):
    """A field: ``help`` (argparse's ``%(default)s`` allowed), ``convert`` (the flag's text, or a number given to the
    API, to the value; ValueError with its own message), ``choices`` (the values allowed), ``switch`` (a bool: ``"on"``
    a flag alone sets it, ``"both"`` a ``--name``/``--no-name`` pair). How the flag shows: ``group`` (its argument
    group's title), ``exclusive`` (``(name, required)``: one flag at most of that name's group, one at least where
    required), ``grid`` (where the command takes a grid: a comma-separated list of values, one result each; the
    words naming its items), ``renamed`` (its former spelling, still read), ``metavar``, ``option`` (the flag's
    spelling where it is not the name's: ``--pass`` for ``passes``). What the command line takes: ``file``
    (``"input"``: a file the command reads; ``"output"``: one it writes, together with its others and never over an
    input), ``positional`` (an argument without a flag), ``nargs`` (argparse's), ``repeat`` (the flag once per
    item: a list), ``const`` (with ``nargs="?"``: the value of the flag given alone)."""
    metadata = {"help": help, "convert": convert, "choices": choices, "switch": switch, "group": group}
    metadata |= {"exclusive": exclusive, "grid": grid, "renamed": renamed, "metavar": metavar, "option": option}
    metadata |= {"file": file, "positional": positional, "nargs": nargs, "repeat": repeat, "const": const}
    return field(default=default, metadata=metadata)


def flag(name, metadata=None):
    """The flag of setting ``name`` (its declaration's ``option`` where it has one)."""
    if metadata and metadata.get("option"):
        return metadata["option"]
    return "--" + name.replace("_", "-")


def text(value):
    """What the flag would be given: a number (numpy's too) as its text, as the flags' converters read text."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, numbers.Real):
        return repr(float(value))
    return value


def check_value(name, metadata, value):
    """``value`` of setting ``name`` checked and converted as its flag is; SettingError in argparse's words."""
    if value is None:
        return None
    if metadata.get("repeat") and isinstance(value, (list, tuple)):
        return [check_value(name, {**metadata, "repeat": False}, item) for item in value]
    choices = metadata["choices"]
    if choices is not None:
        if not isinstance(value, str) or value not in choices:
            listed = ", ".join(map(repr, choices))
            raise SettingError(
                f"argument {flag(name, metadata)}: invalid choice: {shown(value)} (choose from {listed})"
            )
        return value
    if metadata["switch"] is not None:
        if not isinstance(value, bool):
            raise SettingError(f"argument {flag(name, metadata)}: expected True or False, got {shown(value)}")
        return value
    convert = metadata["convert"]
    if convert is None:
        return value
    try:
        return convert(value if getattr(convert, "takes_objects", False) else text(value))
    except (ValueError, TypeError) as error:
        raise SettingError(f"argument {flag(name, metadata)}: {error}") from None


class Declared:
    """The base of a settings dataclass whose fields are :func:`setting`'s: each value given checked and converted
    (frozen dataclasses too); a subclass's ``check`` holds its cross-field rules."""

    def __post_init__(self):
        for found in fields(self):
            if found.metadata:
                object.__setattr__(self, found.name, check_value(found.name, found.metadata, getattr(self, found.name)))
        self.check()

    def check(self):
        """The rules across fields (SettingError); none by default."""

    def describe(self):
        """Every field's value, by name, in declaration order (a run's JSON)."""
        return {found.name: getattr(self, found.name) for found in fields(self)}


class InputPath(str):
    """A path the command reads (kvlab/cli/base.py ``input_file``): the commands find every one among the parsed
    arguments (``check_paths``, which keeps an output off it), wherever its flag is declared."""


def name_or_file(value):
    """A name (a GPU system's) or a file's path (text or a path object): an :class:`InputPath`."""
    value = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a name or a file, got {shown(value)}")
    return InputPath(value)


def nonempty_text(value):
    """A name (an engine's version): non-empty text."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a name or a file, got {shown(value)}")
    return value


def checked(settings, given):
    """The values of ``given`` (by the names of the dataclass ``settings``' fields) that are not None, each checked
    and converted as its flag is; SettingError in argparse's words."""
    declared = {found.name: found for found in fields(settings)}
    return {key: check_value(key, declared[key].metadata, value) for key, value in given.items() if value is not None}


name_or_file.takes_objects = nonempty_text.takes_objects = True  # a path object or a number is not read as its text


def listing(convert, what, most=MAX_POINTS):
    """A converter of a list of distinct items, each checked by ``convert``: a flag's comma-separated text, or a list
    or tuple given to the API; at most ``most`` items (a grid's bound by default: each is a point)."""

    def parse(value):
        items = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, list | tuple) else None
        if not items:
            raise ValueError(f"expected one or more {what}, comma-separated, got {shown(value)}")
        if len(items) > most:  # before the items are read (kvlab.api's grids say the same)
            raise ValueError(
                too_many_points(len(items)) if most == MAX_POINTS else f"{what}: at most {most} items, got {len(items)}"
            )
        items = [convert(item.strip() if isinstance(item, str) else item) for item in items]
        if len(set(items)) != len(items):
            raise ValueError(f"{what}: an item is given twice in {shown(value)}")
        return items

    parse.__name__ = what
    parse.takes_objects = True
    return parse
