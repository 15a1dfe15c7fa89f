"""Every `kvlab` command in the README's shell examples works as printed, from the repository's folder (here a
scratch folder with the repository's inputs linked in, so that the outputs they write land outside it); the
output the README shows under a command is what it prints."""

import re

import pytest
from conftest import ROOT, kvlab

README = (ROOT / "README.md").read_text(encoding="utf-8")
INPUTS = ("data", "models", "results")  # what the examples read, relative to the repository's folder


def shell_blocks(text):
    """``(commands, the block right after, if it is plain output)`` per ```sh block; continuations joined."""
    blocks = []
    for found in re.finditer(r"```sh\n(.*?)```\n(?:\n```\n(.*?)```)?", text, flags=re.DOTALL):
        joined = found.group(1).replace("\\\n", " ")
        commands = [re.sub(r"\s+#.*$", "", line).split() for line in joined.splitlines() if line.strip()]
        blocks.append((commands, found.group(2)))
    return blocks


EXAMPLES = [
    (command, shown if len(commands) == 1 else None)  # output shown under a block of one command is its output
    for commands, shown in shell_blocks(README)
    for command in commands
    if command[0] == "kvlab"
]


def test_the_readme_has_examples_of_the_commands():
    used = {command[1] for command, _ in EXAMPLES}
    assert {"replay", "policies", "mrc", "plan", "scenario", "summarize"} <= used


@pytest.mark.parametrize(("command", "shown"), EXAMPLES, ids=[" ".join(command[:3]) for command, _ in EXAMPLES])
def test_a_readme_command_works_as_printed(tmp_path, command, shown):
    for name in INPUTS:
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    done = kvlab(*command[1:], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr
    if shown is not None:
        assert done.stdout == shown
