"""Shared paths and helpers for the test suite."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
KVLAB = ROOT / "kvlab"
SCHEMA = ROOT / "schemas" / "config.schema.yaml"


def load_config():
    """The committed config.yaml as a dict (a fresh copy each call)."""
    return yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))


def run_python(*args, cwd=ROOT, **kwargs):
    """Run ``python ARGS`` with this interpreter; capture text output."""
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True, **kwargs)


@pytest.fixture
def config():
    return load_config()
