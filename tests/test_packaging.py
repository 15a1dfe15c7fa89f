"""What installs kvlab: pyproject.toml declares every package kvlab imports (``pip install .`` gives a kvlab
that runs), each as a range that holds the exact pin of requirements.txt, which `make run` installs; and what
`make report` needs beyond the imports (Snakemake's report renders with Pygments) is a run-time dependency."""

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from conftest import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

DECLARED = [
    Requirement(line) for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
]
SEED_FALLBACKS = {"kvsim"}  # a lab script run by path imports its sibling by file name


def pins(path):
    found = {}
    for line in (ROOT / path).read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if match:
            found[canonicalize_name(match.group(1))] = Version(match.group(2))
    return found


def imported_distributions():
    """The distributions of every third-party module imported anywhere in kvlab/."""
    modules = set()
    for path in (ROOT / "kvlab").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    modules -= {*sys.stdlib_module_names, "kvlab", *SEED_FALLBACKS}
    owners = packages_distributions()
    missing = sorted(module for module in modules if module not in owners)
    assert not missing, f"imported but not installed: {missing}"
    return {canonicalize_name(owners[module][0]) for module in modules}


def test_every_import_is_declared():
    declared = {canonicalize_name(requirement.name) for requirement in DECLARED}
    assert imported_distributions() <= declared


def test_every_declared_range_holds_its_pin():
    pinned = pins("requirements.txt")
    for requirement in DECLARED:
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is declared but not pinned in requirements.txt"
        assert requirement.specifier.contains(pinned[name]), f"{requirement} does not hold the pin {pinned[name]}"
        assert requirement.specifier, f"{requirement.name}: a range, not any version"


def test_the_report_renders_with_a_run_time_dependency():
    """`make report` (snakemake --report) stops without Pygments: it is installed by `make run`, not the dev set."""
    assert canonicalize_name("Pygments") in pins("requirements.txt")
    assert canonicalize_name("Pygments") in {canonicalize_name(requirement.name) for requirement in DECLARED}
