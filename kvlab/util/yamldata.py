"""A YAML file read as plain data, safely: bounded in bytes and in nodes once its aliases are expanded (a few lines of
aliases can expand into billions of nodes), every key of a mapping given once (YAML would keep the last silently), and
each problem one line naming the file and its line. config.yaml's reader (``kvlab/workflow/config.py``) and a prices
file's (``kvlab/latency/list_prices.py``) are built on it."""

import yaml

__all__ = ["LOADER", "MAX_NODES", "expanded_size", "read", "repeated_key"]

MAX_NODES = 100_000  # YAML nodes after expanding aliases: config.yaml has about a thousand
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's where PyYAML has it: the same nodes and data


def read(path, error, max_bytes=2**20):
    """``(data, composed root)`` of the YAML file ``path``: ``error`` (a ValueError class) with one line where it is
    not plain data of at most ``max_bytes`` (the file's name and YAML's words in it made printable)."""
    from kvlab.util.errors import printable
    from kvlab.util.files import read_bytes

    def refused(message):
        return error(printable(message))

    try:
        data = read_bytes(str(path), max_bytes)
    except ValueError as problem:
        raise refused(str(problem)) from None
    try:
        text = data.decode("utf-8")
        try:
            root = yaml.compose(text, Loader=LOADER)
        except yaml.YAMLError:  # PyYAML's own parser says what is wrong (libyaml words it otherwise)
            root = yaml.compose(text, Loader=yaml.SafeLoader)
    except UnicodeDecodeError:
        raise refused(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as problem:
        mark = getattr(problem, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise refused(f"{where}: not valid YAML ({getattr(problem, 'problem', None) or problem})") from None
    if root is None:
        raise refused(f"{path}: empty")
    try:
        if expanded_size(root) > MAX_NODES:
            raise refused(f"{path}: YAML aliases expand to more than {MAX_NODES} nodes")
        twice = repeated_key(root)
    except RecursionError:
        raise refused(f"{path}: nested too deeply") from None
    if twice is not None:
        raise refused(f"{path}:{twice.start_mark.line + 1}: {twice.value}: the key is given twice in one mapping")
    try:
        return yaml.load(text, Loader=LOADER), root
    except yaml.YAMLError as problem:  # a tag no safe loader builds
        mark = getattr(problem, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise refused(f"{where}: not valid YAML ({getattr(problem, 'problem', None) or problem})") from None
    except RecursionError:
        raise refused(f"{path}: nested too deeply") from None


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
