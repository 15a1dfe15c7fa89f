"""config.yaml as data: read safely, checked against the schema and the cross-field rules, before any job.

Snakemake would run Python for a config that starts with ``__use_yte__: true`` (YTE templating), and YAML
aliases can expand a few lines into billions of nodes; both are refused here, before Snakemake reads the file.
Every problem is one line naming the file, the line and the key.
"""

import math
from pathlib import Path

import yaml

__all__ = ["MAX_NODES", "bad_number", "load", "validate"]

MAX_NODES = 100_000  # YAML nodes after expanding aliases: config.yaml has about a thousand
MAX_BYTES = 2**20
MAX_WHOLE = 2**53  # as every command's whole numbers
SCHEMA = Path(__file__).absolute().parent.parent / "schemas" / "config.schema.yaml"


class ConfigFileError(ValueError):
    """A config file that is not data kvlab runs; the message is one line naming file, line and key."""


def expanded_size(node, sizes=None):
    """Nodes under ``node`` with every alias expanded, counted without expanding (shared nodes counted once
    per use); stops early past MAX_NODES."""
    sizes = {} if sizes is None else sizes
    if id(node) in sizes:
        return sizes[id(node)]
    sizes[id(node)] = MAX_NODES + 1  # a node inside itself (a recursive alias) expands without end
    total = 1
    if isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = node.value
    else:
        children = []
    for child in children:
        total += expanded_size(child, sizes)
        if total > MAX_NODES:
            break
    sizes[id(node)] = total
    return total


def line_of(root, path):
    """The line of config key ``path`` (a tuple of keys and indexes) in the composed YAML, or of its deepest
    existing parent."""
    node, line = root, root.start_mark.line + 1 if root is not None else None
    for key in path:
        if isinstance(node, yaml.MappingNode):
            found = [(k, v) for k, v in node.value if k.value == str(key)]
            if not found:
                break
            line, node = found[0][0].start_mark.line + 1, found[0][1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            break
    return line


def dotted(path):
    return ".".join(str(key) for key in path) or "(top level)"


def load(path):
    """``(config, composed root)`` from a config.yaml; ConfigFileError (one line) if it is not plain data."""
    from kvlab.files import read_bytes

    try:
        data = read_bytes(str(path), MAX_BYTES)
    except ValueError as error:
        raise ConfigFileError(str(error)) from None
    try:
        text = data.decode("utf-8")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigFileError(f"{where}: not valid YAML ({getattr(error, 'problem', None) or error})") from None
    if root is None:
        raise ConfigFileError(f"{path}: empty")
    if expanded_size(root) > MAX_NODES:
        raise ConfigFileError(f"{path}: YAML aliases expand to more than {MAX_NODES} nodes")
    twice = repeated_key(root)
    if twice is not None:
        raise ConfigFileError(
            f"{path}:{twice.start_mark.line + 1}: {twice.value}: the key is given twice in one mapping"
        )
    if isinstance(root, yaml.MappingNode) and any(key.value == "__use_yte__" for key, _ in root.value):
        line = line_of(root, ("__use_yte__",))
        raise ConfigFileError(f"{path}:{line}: __use_yte__: YTE templating runs code; kvlab's config is plain data")
    try:
        config = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as error:
        raise ConfigFileError(f"{path}: not valid YAML ({error})") from None
    return config, root


def repeated_key(node, seen=None):
    """The first key node that repeats a key of its mapping (YAML would keep the last silently), or None."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in keys and key.value != "<<":
                    return key
                keys.add(key.value)
            found = repeated_key(value, seen)
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            found = repeated_key(item, seen)
            if found is not None:
                return found
    return None


def bad_number(config, path=()):
    """``(key path, why)`` of the first number kvlab cannot take (NaN, infinite, or a whole number beyond
    2**53), or None."""
    if isinstance(config, float) and not math.isfinite(config):
        return path, "not a finite number"
    if isinstance(config, int) and not isinstance(config, bool) and abs(config) > MAX_WHOLE:
        return path, f"a whole number beyond {MAX_WHOLE}"
    children = config.items() if isinstance(config, dict) else enumerate(config) if isinstance(config, list) else ()
    for key, value in children:
        found = bad_number(value, (*path, key))
        if found is not None:
            return found
    return None


def validate(config, root=None, path="config.yaml", schema=SCHEMA):
    """ConfigFileError (one line: file, line, key) for a non-finite number or the schema's most relevant error."""
    import jsonschema
    from jsonschema.exceptions import best_match

    bad = bad_number(config)
    if bad is not None:
        raise ConfigFileError(f"{path}:{line_of(root, bad[0])}: {dotted(bad[0])}: {bad[1]}")
    validator = jsonschema.Draft202012Validator(yaml.safe_load(Path(schema).read_text(encoding="utf-8")))
    errors = list(validator.iter_errors(config))
    # "unevaluated properties" only echoes a failure inside an allOf: the failure itself says more
    error = best_match([error for error in errors if error.validator != "unevaluatedProperties"] or errors)
    if error is not None:
        where = tuple(error.absolute_path)
        message = error.message
        known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        unknown = (
            [key for key in error.instance if key not in known] if error.validator == "additionalProperties" else []
        )
        if unknown and isinstance(error.instance, dict):
            where = (*where, unknown[0])
            message = f"unknown key (valid here: {', '.join(known)})" if known else "unknown key"
        instance = repr(error.instance)
        if message.startswith(instance) and len(instance) > 40:  # the value itself, too long to show
            message = "the value" + message[len(instance) :]
        message = message if len(message) <= 200 else message[:195] + "..."
        line = line_of(root, where) if root is not None else None
        raise ConfigFileError(f"{path}{f':{line}' if line else ''}: {dotted(where)}: {message}")
