"""What the four functions share: the results' base and the grid, the settings checked as the commands' flags
check them (the same words on a bad one), the workload from a name or a mapping, and the memory meter."""

import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from itertools import product

from kvlab.util.errors import KvlabError, SettingError, describe
from kvlab.util.files import number_text, shown
from kvlab.util.settings import check_value
from kvlab.util.settings import flag as _flag
from kvlab.util.settings import text as _text


def _scalars(document):
    """The figures of a JSON object that are single values: its ``cache``'s, then its own."""
    found = {key: value for key, value in document.get("cache", {}).items() if not isinstance(value, dict | list)}
    found.update({key: value for key, value in document.items() if not isinstance(value, dict | list)})
    return found


def _leaves(value, path=()):
    """``(path, value)`` of every figure inside a JSON value: a number, a word or a null, at the path of keys that
    leads to it; a list of rounds is keyed by each round's name, a list of words (flags, notes) is left out."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(inner, (*path, key))
    elif isinstance(value, list):
        for inner in value:
            if isinstance(inner, dict) and "round" in inner:
                yield from _leaves(
                    {key: item for key, item in inner.items() if key != "round"}, (*path, inner["round"])
                )
    else:
        yield path, value


def _frame(rows, columns=None):
    """A DataFrame of ``rows`` (dicts); a column of whole numbers that some rows lack stays whole (pandas' Int64,
    not floats beside NaN)."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=columns)
    for name in frame.columns:
        values = [row.get(name) for row in rows]
        present = [value for value in values if value is not None]
        if len(present) < len(values) and present and all(type(value) is int for value in present):
            frame[name] = pd.array(values, dtype="Int64")
    return frame


class _Result:
    """What every result shares: ``text``, the command's JSON, read back as data."""

    def to_dict(self):
        """The command's JSON as data."""
        return json.loads(self.text)

    def summary(self):
        """The single figures (the cache's, then the result's own): a row of a grid's frame."""
        return _scalars(self.to_dict())


@dataclass(frozen=True)
class Grid:
    """One result per point of a grid (a list given where a room or a budget goes), in order: ``axes`` name the
    settings that vary, ``points`` their values at each result (the last axis varying fastest)."""

    axes: tuple
    points: tuple
    results: tuple

    def __len__(self):
        return len(self.results)

    def __iter__(self):
        return iter(self.results)

    def __getitem__(self, index):
        return self.results[index]

    def to_dict(self):
        """A list: what the command prints at each point, in order."""
        return [result.to_dict() for result in self.results]

    def to_frame(self):
        """One row per point: its settings, then the result's single figures (a plan's hit ratio, its budgets)."""
        rows = []
        for point, result in zip(self.points, self.results, strict=True):
            given = dict(zip(self.axes, point, strict=True))
            rows.append({**given, **{key: value for key, value in result.summary().items() if key not in given}})
        return _frame(rows)


# --- settings: each checked as the command's flag checks it, the same words on a bad one ------------------------


class _Keyword(TypeError):
    """A keyword the function does not take (Python's own words for it)."""


def _setting(name, convert, value):
    """``value`` through the converter of flag ``--name``; SettingError as argparse words it."""
    return check_value(name, {"choices": None, "switch": None, "convert": convert}, value)


def _choice(name, value, choices):
    return check_value(name, {"choices": tuple(choices), "switch": None, "convert": None}, value)


def _switch(name, value):
    if not isinstance(value, bool):
        raise SettingError(f"argument {_flag(name)}: expected True or False, got {shown(value)}")
    return value


def _hardware_values(given):
    """The :class:`kvlab.latency.hardware.HardwareSettings` values among ``given`` checked and converted as their flags
    convert them, the ones left None left out; SettingError in argparse's words."""
    from kvlab.latency.hardware import HardwareSettings
    from kvlab.util.settings import checked

    return checked(HardwareSettings, given)


def _ratio(text):
    value = float(text) if number_text(text) else math.nan
    if not 0 <= value <= 1:
        raise ValueError(f"expected a ratio between 0 and 1, got {shown(text)}")
    return value


def _exclusive(settings, first, second):
    """Exactly one of two flags (a required, mutually exclusive pair)."""
    if settings[first] is not None and settings[second] is not None:
        raise SettingError(f"argument {_flag(second)}: not allowed with argument {_flag(first)}")
    if settings[first] is None and settings[second] is None:
        raise SettingError(f"one of the arguments {_flag(first)} {_flag(second)} is required")


def workload_of(workload, options, block_tokens=None, function="kvlab"):
    """The workload: a source's name and its options, or a mapping of both (``source`` and options); an option of
    another source, or a bad one, is a SettingError in the command's words."""
    from kvlab.workloads import WORKLOADS, WorkloadError

    if isinstance(workload, Mapping):
        spec = dict(workload)
        source = spec.pop("source", None)
        twice = sorted(set(spec) & set(options))
        if twice:
            raise _Keyword(f"{function}() got {twice[0]!r} in the workload and as a keyword")
        options = {**spec, **options}
    else:
        source = workload
    _choice("workload", source, sorted(WORKLOADS))
    known = {option.name for other in WORKLOADS.values() for option in other.options}
    unknown = sorted(set(options) - known)
    if unknown:
        raise _Keyword(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    chosen = WORKLOADS[source]
    own = {option.name for option in chosen.options}
    for other in WORKLOADS.values():
        for option in other.options:
            if option.name not in own and options.get(option.name) is not None:
                raise SettingError(f"{_flag(option.name)} is a setting of --workload {other.name}, not {source}")
    settings = {option.name: _text(options.get(option.name)) for option in chosen.options}
    try:
        return chosen(block_tokens, **settings)
    except WorkloadError as error:
        raise SettingError(str(error)) from None


def _declared(leading, settings, trailing, rest="options"):
    """A function's signature from its declarations: keyword-only ``leading`` names without a default, each declared
    field of the dataclass ``settings`` with its default (none where it has none), ``trailing`` (name -> default),
    and ``**rest`` (the workload's options; None: none)."""
    import inspect
    from dataclasses import MISSING, fields

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter(name, keyword) for name in leading]
    for found in fields(settings):
        default = inspect.Parameter.empty if found.default is MISSING else found.default
        parameters.append(inspect.Parameter(found.name, keyword, default=default))
    parameters += [inspect.Parameter(name, keyword, default=value) for name, value in trailing.items()]
    if rest is not None:
        parameters.append(inspect.Parameter(rest, inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(parameters)


def _bound(function, given):
    """The keywords ``given`` to ``function`` bound to its declared signature (:func:`_declared`), its defaults filled
    in and the workload's options among them; Python's TypeError for one it lacks."""
    import inspect

    try:
        bound = inspect.signature(function).bind(**given)
    except TypeError as error:
        raise TypeError(f"{function.__name__}() {error}") from None
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.update(arguments.pop("options", {}))
    return arguments


def _meter(max_memory, footprint):
    from kvlab.util.memory import Meter, default_limit, memory_size

    limit = _setting("max_memory", memory_size, max_memory)
    return Meter(limit or default_limit(), footprint)


def _grid(one, settings, axes):
    """``one(settings)``, or a :class:`Grid` of it over every axis given a list (each point's value in its place; a
    numpy array or a pandas Series is a list too), of at most :data:`kvlab.util.numbers.MAX_POINTS` points."""
    from kvlab.util.numbers import grid_points
    from kvlab.util.progress import progress_bar

    arrays = set()  # numpy arrays and pandas Series, read once their sizes are within the bound
    for axis in axes:
        value = settings[axis]
        if hasattr(value, "tolist") and not isinstance(value, numbers.Number):
            if hasattr(value, "__len__") and getattr(value, "ndim", 1):
                arrays.add(axis)
            else:  # a 0-d array: its value
                settings[axis] = value.tolist()
    varied = [axis for axis in axes if isinstance(settings[axis], list | tuple | range) or axis in arrays]
    if not varied:
        return _guarded(one, settings)
    for axis in varied:
        if not len(settings[axis]):
            raise SettingError(f"argument {_flag(axis)}: expected a value or a list of values, got an empty list")
    grid_points({axis: len(settings[axis]) for axis in varied})  # its sizes before any value is read
    for axis in varied:
        if axis in arrays:
            settings[axis] = settings[axis].tolist()
        points = [_point(value) for value in settings[axis]]
        if len(set(points)) != len(points):  # as kvlab.cli.base.listing refuses a flag's list: one point, one result
            raise SettingError(f"argument {_flag(axis)}: an item is given twice in {shown(list(settings[axis]))}")
    points = tuple(product(*(settings[axis] for axis in varied)))
    bar = progress_bar(len(points), unit="point")  # on a terminal, once a grid has run for a second
    results = []
    try:
        for point in points:
            results.append(_guarded(one, {**settings, **dict(zip(varied, point, strict=True))}))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return Grid(tuple(varied), points, tuple(results))


def _point(value):
    """What a grid's value is as a point: a number by its value (``1``, ``1.0`` and ``"1.0"`` one point), anything
    else as it is (its own converter refuses it); an unhashable value, its identity."""
    text = _text(value)
    if isinstance(text, str) and number_text(text.strip()):
        return Decimal(text.strip())
    try:
        hash(value)
    except TypeError:
        return id(value)
    return value


def _guarded(one, settings):
    """``one(settings)`` with every error of bad input a KvlabError in the command's words (a SettingError stays
    one), the machine's memory running out too (the command's line); an interrupt is left as it is."""
    from kvlab.util.memory import MemoryLimitError

    try:
        return one(**settings)
    except _Keyword as error:
        raise TypeError(str(error)) from None
    except KvlabError:
        raise
    except MemoryLimitError as error:
        raise KvlabError(str(error)) from error
    except MemoryError:
        raise KvlabError("out of memory") from None
    except (ValueError, OSError, ArithmeticError, RecursionError, LookupError, TypeError) as error:
        raise KvlabError(describe(error)) from error


# --- plan -----------------------------------------------------------------------------------------------------


def compile_notice():
    """Said on a terminal before numba compiles the curve kernels, so that a first run's pause has a reason (never in
    a log, a pipe or a notebook, where stderr is not a terminal)."""
    import sys

    if sys.stderr.isatty():
        sys.stderr.write("kvlab: compiling the exact-curve kernels (numba; once per checkout, about 10 s) ...\n")
        sys.stderr.flush()


# --- replay ---------------------------------------------------------------------------------------------------
