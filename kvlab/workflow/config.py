"""config.yaml as data: read safely, checked against the schema and the cross-field rules, before any job.

Snakemake would run Python for a config that starts with ``__use_yte__: true`` (YTE templating), and YAML
aliases can expand a few lines into billions of nodes; both are refused here, before Snakemake reads the file.
Every problem is one line naming the file, the line and the key.
"""

import math
import os
import re
import sys
from functools import cache
from pathlib import Path

import yaml

from kvlab.util.files import line_of
from kvlab.util.numbers import MAX_WHOLE, yaml_text_number
from kvlab.util.yamldata import LOADER, MAX_NODES, read

__all__ = [
    "MAX_NODES",
    "RENAMED",
    "ConfigFileError",
    "bad_value",
    "load",
    "load_mapping",
    "load_workflow_config",
    "located",
    "normalise",
    "validate",
]

MAX_BYTES = 2**20

SCHEMA = Path(__file__).absolute().parents[2] / "schemas" / "config.schema.yaml"
CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # a newline, a tab, a NUL: in a name they reach file names and flags

# Keys renamed, kept for one release: (where the key stood, "*" any name) -> its new spelling. A room is
# gpu_tokens/cpu_tokens and a budget *_gib outside the lab contract (runs and sweeps keep the lab's gpu/cpu).
RENAMED = {
    ("plans", "*", "gpu_gb"): "gpu_gib",
    ("plans", "*", "cpu_gb"): "cpu_gib",
    ("ttft", "budgets", "cpu_gb"): "cpu_gib",
    **{
        (*section, "configs", "*", room): f"{room}_tokens"
        for section in (("example_measurement",), ("real_measurement",), ("ttft", "setting"))
        for room in ("gpu", "cpu")
    },
}
SAID = set()  # (file, key) whose deprecation this process has said: once each


class ConfigFileError(ValueError):
    """A config file that is not data kvlab runs; the message is one line naming file, line and key."""


def dotted(path):
    return ".".join(str(key) for key in path) or "(top level)"


def load(path):
    """``(config, composed root)`` from a config.yaml; ConfigFileError (one line) if it is not plain data."""
    config, root = read(path, ConfigFileError, MAX_BYTES)
    if isinstance(root, yaml.MappingNode) and any(key.value == "__use_yte__" for key, _ in root.value):
        line = line_of(root, ("__use_yte__",))
        raise ConfigFileError(f"{path}:{line}: __use_yte__: YTE templating runs code; kvlab's config is plain data")
    return normalise(config, root, path), root


def renamed_keys(config, pattern, at=()):
    """``(key path, mapping)`` of each mapping of ``config`` at ``pattern`` (its keys, ``"*"`` any)."""
    if not pattern:
        yield at, config
        return
    if isinstance(config, dict):
        names = [name for name in config if isinstance(name, str)] if pattern[0] == "*" else [pattern[0]]
        for name in names:
            if name in config:
                yield from renamed_keys(config[name], pattern[1:], (*at, name))


def normalise(config, root=None, path="config.yaml"):
    """``config`` with every deprecated key (:data:`RENAMED`) renamed in place (in its place, so that a mapping
    shared through a YAML alias stays one), each said once on stderr (``kvlab: FILE: KEY is deprecated; use NEW``);
    ConfigFileError (one line) for a mapping that has both spellings of one key. Applied as a config is loaded,
    before the schema sees it; a Snakemake that ``kvlab run`` started says nothing (the run said it)."""
    where = located(root, path)
    notices = []  # (line, key, new spelling), said in the file's order
    for (*parent, old), new in RENAMED.items():
        for at, mapping in list(renamed_keys(config, parent)):
            if not isinstance(mapping, dict) or old not in mapping:
                continue
            if new in mapping:
                raise ConfigFileError(
                    f"{where((*at, old))}: {dotted(at)}: both {old} and {new}; {old} is the deprecated spelling of"
                    f" {new}: keep one"
                )
            items = [(new if key == old else key, value) for key, value in mapping.items()]
            mapping.clear()
            mapping.update(items)
            notices.append((line_of(root, (*at, old)) if isinstance(root, yaml.Node) else 0, dotted((*at, old)), new))
    for _, key, new in sorted(notices):
        if (str(path), key) not in SAID and not os.environ.get("KVLAB_CONFIG_CHECKED"):
            SAID.add((str(path), key))
            sys.stderr.write(f"kvlab: {path}: {key} is deprecated; use {new}\n")
    return config


def bad_value(config, path=()):
    """``(key path, why)`` of the first value kvlab cannot take, or None: a number that is NaN, infinite or a whole
    number beyond 2**53, and a key or a string holding a control character (a name ending in a newline would
    write ``results/<name>⏎.json``; no path, name or note of kvlab's needs one)."""
    if isinstance(config, float) and not math.isfinite(config):
        return path, "not a finite number"
    if isinstance(config, int) and not isinstance(config, bool) and abs(config) > MAX_WHOLE:
        return path, f"a whole number beyond {MAX_WHOLE}"
    if isinstance(config, str) and CONTROL.search(config):
        return path, "a control character (a newline, a tab) in a value"
    children = config.items() if isinstance(config, dict) else enumerate(config) if isinstance(config, list) else ()
    for key, value in children:
        if isinstance(key, str) and CONTROL.search(key):
            return (*path, key), "a control character (a newline, a tab) in a key"
        found = bad_value(value, (*path, key))
        if found is not None:
            return found
    return None


def _whole(checker, instance):
    """JSON Schema's "integer" takes 21520.0; kvlab's commands do not (``--gpu 21520.0`` is refused)."""
    return isinstance(instance, int) and not isinstance(instance, bool)


@cache
def validator(schema):
    """The schema's validator, read once per process (parsing the schema is most of a validation's time)."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    strict = jsonschema.validators.extend(base, type_checker=base.TYPE_CHECKER.redefine("integer", _whole))
    return strict(yaml.load(Path(schema).read_text(encoding="utf-8"), Loader=LOADER))


def located(root, path):
    """``where(key path)``: ``FILE:LINE`` of a key in one composed file (``FILE`` alone without its parse)."""

    def where(key):
        line = line_of(root, key) if isinstance(root, yaml.Node) else None
        return f"{path}:{line}" if line else str(path)

    return where


def validate(config, root=None, path="config.yaml", schema=SCHEMA, where=None):
    """ConfigFileError (one line: file, line, key) for a value kvlab cannot take or the schema's most relevant
    error; ``where`` (key path -> ``FILE:LINE``) places it when the config is merged from several sources."""
    from jsonschema.exceptions import best_match

    where = where or located(root, path)
    bad = bad_value(config)
    if bad is not None:
        raise ConfigFileError(f"{where(bad[0])}: {dotted(bad[0])}: {bad[1]}")
    errors = list(validator(schema).iter_errors(config))
    # "unevaluated properties" only echoes a failure inside an allOf: the failure itself says more
    error = best_match([error for error in errors if error.validator != "unevaluatedProperties"] or errors)
    if error is not None:
        key = tuple(error.absolute_path)
        message = error.message
        known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        unknown = (
            [name for name in error.instance if name not in known] if error.validator == "additionalProperties" else []
        )
        if unknown and isinstance(error.instance, dict):
            key = (*key, unknown[0])
            message = f"unknown key (valid here: {', '.join(known)})" if known else "unknown key"
        instance = repr(error.instance)
        if message.startswith(instance) and len(instance) > 40:  # the value itself, too long to show
            message = "the value" + message[len(instance) :]
        message = message if len(message) <= 200 else message[:195] + "..."
        raise ConfigFileError(f"{where(key)}: {dotted(key)}: {message}{yaml_text_number(error.instance)}")


def load_mapping(path):
    """``(config, composed root)`` of a file Snakemake would read as a config: :func:`load`'s checks, and a mapping
    at the top level (as Snakemake requires)."""
    config, root = load(path)
    if not isinstance(config, dict):
        raise ConfigFileError(f"{path}: a config is a mapping of keys at its top level")
    return config, root


def load_workflow_config(path):
    """The Snakefile's config file read as kvlab reads a config (:func:`load_mapping`: as plain data, so that YTE
    templating, code, never runs and an alias bomb never expands); the error is Snakemake's WorkflowError, in one
    line."""
    from snakemake.exceptions import WorkflowError

    try:
        return load_mapping(path)[0]
    except ConfigFileError as error:
        raise WorkflowError(str(error)) from None
