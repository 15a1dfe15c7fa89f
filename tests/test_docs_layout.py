"""docs/layout.md's table is checked against the tree, not kept by hand: every package folder and every top-level
module of kvlab/ has a line, every path the table names exists (a file a folder's line names, inside that folder);
and the README's and the docs pages' relative links lead to files and headings that exist."""

import re
from pathlib import Path

import pytest
from conftest import KVLAB, ROOT

LAYOUT = ROOT / "docs" / "layout.md"
PAGES = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = re.compile(r"`([^`]+)`")
FILE_NAME = re.compile(r"[\w.-]+\.(?:py|md|txt|yaml|smk|toml|sh)")


def table_rows(text):
    """``(first cell, other cells)`` of every table body row of a markdown text."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|:- "):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] in ("path",):  # a header
            continue
        rows.append((cells[0], " | ".join(cells[1:])))
    return rows


ROWS = table_rows(LAYOUT.read_text(encoding="utf-8"))


def named(cell):
    """The paths a first cell names (each in backticks)."""
    return [path for path in CODE.findall(cell) if " " not in path]


def exists(path):
    return any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()


def packages():
    """Every package folder of kvlab/ (kvlab/ itself aside) and every top-level module, as layout.md spells them."""
    folders = sorted(
        f"{folder.relative_to(ROOT).as_posix()}/"
        for folder in KVLAB.rglob("*")
        if folder.is_dir() and (folder / "__init__.py").is_file() and "__pycache__" not in folder.parts
    )
    modules = sorted(module.relative_to(ROOT).as_posix() for module in KVLAB.glob("*.py"))
    return folders + modules


def test_the_layout_has_a_table():
    assert len(ROWS) >= 20
    assert all(named(first) for first, _ in ROWS), "every line's first cell names a path in backticks"


@pytest.mark.parametrize("path", packages())
def test_every_package_and_top_level_module_has_a_line(path):
    listed = {name for first, _ in ROWS for name in named(first)}
    assert path in listed, f"{path} has no line in docs/layout.md"


@pytest.mark.parametrize("path", [name for first, _ in ROWS for name in named(first)])
def test_every_path_the_layout_names_exists(path):
    assert exists(path), f"docs/layout.md names {path}, which does not exist"


FOLDER_FILES = [
    (folder, name)
    for first, rest in ROWS
    for folder in named(first)
    if folder.endswith("/") and folder.startswith("kvlab/")
    for name in CODE.findall(rest)
    if FILE_NAME.fullmatch(name)
]


@pytest.mark.parametrize(("folder", "name"), FOLDER_FILES, ids=[f"{f}{n}" for f, n in FOLDER_FILES])
def test_the_files_a_folders_line_names_exist(folder, name):
    assert (ROOT / folder / name).exists() or (ROOT / name).exists(), f"docs/layout.md: {folder} has no {name}"


def test_the_paths_in_the_lines_exist():
    """A kvlab/ path named anywhere in a line (a command wrapper, a module) exists."""
    missing = [
        path
        for first, rest in ROWS
        for path in CODE.findall(rest)
        if path.startswith("kvlab/") and " " not in path and not exists(path)
    ]
    assert not missing, f"docs/layout.md names what does not exist: {missing}"


# ---------------------------------------------------------------------------------------------------- the links

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def slugs(path):
    """The anchors GitHub gives the headings of a markdown file."""
    seen = {}
    found = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading[1].replace("`", "").lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(path):
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


LINKS = [(page, target) for page in PAGES for target in dict.fromkeys(links(page))]


@pytest.mark.parametrize(("page", "target"), LINKS, ids=[f"{p.relative_to(ROOT).as_posix()}->{t}" for p, t in LINKS])
def test_a_relative_link_leads_somewhere(page, target):
    file, _, anchor = target.partition("#")
    destination = (page.parent / file).resolve() if file else page
    assert destination.exists(), f"{page.relative_to(ROOT)}: {target}: no such file"
    assert Path(destination).is_relative_to(ROOT), f"{page.relative_to(ROOT)}: {target} leads out of the repository"
    if anchor:
        assert destination.suffix == ".md", f"{page.relative_to(ROOT)}: {target}: an anchor outside markdown"
        assert anchor in slugs(destination), f"{page.relative_to(ROOT)}: {target}: no such heading"
