"""Every `kvlab` command in the shell examples of the README and the docs pages works as printed, from the
repository's folder (here a scratch folder with the repository's inputs linked in, so that the outputs they write
land outside it); the output a page shows under a command is what it prints. docs/contract.md is left out: its one
shell block is a synopsis (`[--gpu 21520] ...`), not an example."""

import re
import shlex

import pytest
from conftest import ROOT, kvlab

PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "contract.md")]
INPUTS = ("data", "models", "results")  # what the examples read, relative to the repository's folder


def shell_blocks(text):
    """``(commands, the block right after, if it is plain output)`` per ```sh block; continuations joined."""
    blocks = []
    for found in re.finditer(r"```sh\n(.*?)```\n(?:\n```\n(.*?)```)?", text, flags=re.DOTALL):
        joined = found.group(1).replace("\\\n", " ")
        commands = [shlex.split(re.sub(r"\s+#.*$", "", line)) for line in joined.splitlines() if line.strip()]
        blocks.append((commands, found.group(2)))
    return blocks


def examples(page):
    """``(command, output shown or None)`` of every kvlab command of a page's ```sh blocks."""
    return [
        (command, shown if len(commands) == 1 else None)  # output shown under a block of one command is its output
        for commands, shown in shell_blocks(page.read_text(encoding="utf-8"))
        for command in commands
        if command[0] == "kvlab"
    ]


EXAMPLES = [(page.relative_to(ROOT).as_posix(), command, shown) for page in PAGES for command, shown in examples(page)]


def test_the_readme_has_examples_of_the_commands():
    """The README walks its worked question through size, mrc and plan (with an engine's settings and the output
    shown), and the README with the docs pages shows every command a user runs on their own data."""
    readme = {command[1] for page, command, _ in EXAMPLES if page == "README.md"}
    assert {"size", "mrc", "plan"} <= readme
    assert any(page == "README.md" and "--engine" in command and shown for page, command, shown in EXAMPLES)
    used = {command[1] for _, command, _ in EXAMPLES}
    assert {"replay", "policies", "mrc", "plan", "size", "scenario", "summarize", "ttft"} <= used
    pages = {page for page, _, _ in EXAMPLES}
    assert {"README.md", "docs/lab.md", "docs/replay.md", "docs/designs.md", "docs/planner.md", "docs/ttft.md"} <= pages


@pytest.mark.parametrize(
    ("page", "command", "shown"),
    EXAMPLES,
    ids=[f"{page}: {' '.join(command[:3])}" for page, command, _ in EXAMPLES],
)
def test_a_documented_command_works_as_printed(tmp_path, page, command, shown):
    for name in INPUTS:
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    done = kvlab(*command[1:], cwd=tmp_path)
    assert done.returncode == 0, f"{page}: {' '.join(command)}: {done.stderr}"
    assert "error" not in done.stderr
    assert "deprecated" not in done.stderr, f"{page}: {' '.join(command)} uses a deprecated spelling"
    if shown is not None:
        assert done.stdout == shown
