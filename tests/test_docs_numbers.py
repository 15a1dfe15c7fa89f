"""Every number the README and the docs pages quote from `results/` is checked against the artifact it comes from.

A quoted number carries its source as an HTML comment right after it (invisible on GitHub), the marker:

    0.970665<!-- results/plan/lab.json: rounds[round=pass2].token_hit_ratio -->
    **10**<!-- results/offload.json: passes[1].cpu_hits -->
    0.971<!-- results/replay/lab.csv: token_hit_ratio where block_tokens=256,cpu_tokens=56000,round=pass2 -->
    37.34 %<!-- results/mrc/conversation/block512-gpu.json: max_token_hit_ratio -->

- A JSON source is a path of keys separated by dots; ``[3]`` picks an element of a list by position and
  ``[key=value,key=value]`` the one element whose fields have those values.
- A CSV source is ``COLUMN where key=value,key=value``: exactly one row must match (no ``where``: a file of
  one row). ``key=a/b/c`` checks the number against each of the rows ``a``, ``b`` and ``c`` (every combination
  of the alternatives must match exactly one row), for a cell that stands for several equal rows.
- The number shown (thousands separators allowed; with a ``%`` it is the value x 100; bold or code around it
  allowed) must equal the artifact's value rounded half up to the decimals shown.

A marker whose file, key, column or row is missing fails, and so does a marker the parser cannot read. The
guard tests make the markers necessary: every page that quotes results has them, and in a section whose heading
says "numbers from `results/`" every number of a table's numeric cells, every bold number and every number of its
prose with decimals or a % carries one (or says ``<!-- not from results: WHY -->`` right after it).
"""

import csv
import itertools
import json
import re
from decimal import ROUND_HALF_UP, Decimal

import pytest
from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
QUOTING = ["README.md", "docs/lab.md", "docs/replay.md", "docs/designs.md", "docs/planner.md", "docs/ttft.md"]

NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
MARKER = re.compile(
    rf"(?<![\w.,])(?P<shown>{NUMBER})(?P<percent>\s?%)?(?:\*\*|`)?<!--\s*(?P<source>results/[^\s:]+):\s*(?P<selector>.*?)\s*-->"
)
ANY_MARKER = re.compile(r"<!--\s*results/.*?-->", re.DOTALL)
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")


def prose(text):
    """``text`` without its code blocks (kept as blank lines) and without code spans that show a comment."""
    text = FENCE.sub(lambda fence: "\n" * fence.group(0).count("\n"), text)
    return CODE_SPAN.sub(lambda span: "" if "<!--" in span[2] else span[0], text)  # a marker shown as code is text


def page_name(path):
    return str(path.relative_to(ROOT))


def markers(path):
    """``(line number, shown, percent, source, selector)`` of every marker of a page, outside code blocks."""
    text = prose(path.read_text(encoding="utf-8"))
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in MARKER.finditer(line):
            found.append((number, match["shown"], bool(match["percent"]), match["source"], match["selector"]))
    return found


ALL = [(page_name(path), *marker) for path in PAGES for marker in markers(path)]


# ---------------------------------------------------------------------------------------------- reading sources


def parse_conditions(text):
    """``key=value,key=value`` as ``[(key, [alternatives])]``."""
    conditions = []
    for part in text.split(","):
        key, equals, value = part.partition("=")
        if not equals or not key.strip() or not value.strip():
            raise ValueError(f"a condition is key=value, not {part!r}")
        conditions.append((key.strip(), [v.strip() for v in value.split("/")]))
    return conditions


def same(cell, wanted):
    """A cell (a string, or a JSON value) equals the text of a condition: as numbers if both are, else as text."""
    if isinstance(cell, bool) or cell is None:
        return str(cell).lower() == wanted.lower()
    try:
        return Decimal(str(cell)) == Decimal(wanted)
    except ArithmeticError:
        return str(cell) == wanted


def json_value(data, selector):
    """The value at a path of keys, ``[index]`` and ``[key=value,...]``; a KeyError/IndexError/ValueError if absent."""
    tokens = re.findall(r"\[([^\]]*)\]|([^.\[\]]+)", selector)
    if not tokens:
        raise ValueError(f"no path in {selector!r}")
    node = data
    for inside, key in tokens:
        if key:
            if not isinstance(node, dict) or key not in node:
                raise KeyError(f"no key {key!r}")
            node = node[key]
        elif re.fullmatch(r"\d+", inside.strip()):
            if not isinstance(node, list) or int(inside) >= len(node):
                raise IndexError(f"no element [{inside}]")
            node = node[int(inside)]
        else:
            conditions = parse_conditions(inside)
            if any(len(values) > 1 for _, values in conditions):
                raise ValueError("alternatives (a/b) are for CSV rows only")
            if not isinstance(node, list):
                raise KeyError(f"[{inside}] picks from a list")
            picked = [
                item
                for item in node
                if isinstance(item, dict) and all(k in item and same(item[k], v[0]) for k, v in conditions)
            ]
            if len(picked) != 1:
                raise KeyError(f"[{inside}] matches {len(picked)} elements, not one")
            node = picked[0]
    return [node]


def csv_values(rows, selector):
    """The column's value in each row the ``where`` clause picks (one per combination of alternatives)."""
    column, where = (selector.split(" where ", 1) + [""])[:2]
    column, where = column.strip(), where.strip()
    if not rows or column not in rows[0]:
        raise KeyError(f"no column {column!r}")
    if not where:
        if len(rows) != 1:
            raise KeyError(f"no where clause for a file of {len(rows)} rows")
        return [rows[0][column]]
    conditions = parse_conditions(where)
    for key, _ in conditions:
        if key not in rows[0]:
            raise KeyError(f"no column {key!r}")
    values = []
    for combination in itertools.product(*(alternatives for _, alternatives in conditions)):
        picked = [
            row for row in rows if all(same(row[k], v) for (k, _), v in zip(conditions, combination, strict=True))
        ]
        if len(picked) != 1:
            shown = ",".join(f"{k}={v}" for (k, _), v in zip(conditions, combination, strict=True))
            raise KeyError(f"{shown} matches {len(picked)} rows, not one")
        values.append(picked[0][column])
    return values


_CACHE = {}


def source_values(source, selector):
    path = ROOT / source
    if path not in _CACHE:
        text = path.read_text(encoding="utf-8")  # a missing artifact fails here
        _CACHE[path] = json.loads(text) if path.suffix == ".json" else list(csv.DictReader(text.splitlines()))
    data = _CACHE[path]
    if path.suffix == ".json":
        return json_value(data, selector)
    if path.suffix == ".csv":
        return csv_values(data, selector)
    raise ValueError(f"a marker names a .json or a .csv artifact, not {source}")


def rounded(value, shown, percent):
    """The artifact's value rounded half up to the decimals of the text shown (x 100 for a percentage)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str) or value == "":
        raise ValueError(f"the artifact's value {value!r} is not a number")
    exact = Decimal(str(value)) * (100 if percent else 1)
    decimals = len(shown.partition(".")[2])
    return exact.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)


# ---------------------------------------------------------------------------------------------------- the tests


def test_the_docs_quote_numbers_with_markers():
    assert len(ALL) >= 100, "the README and docs pages should check what they quote from results/"


@pytest.mark.parametrize(
    ("page", "line", "shown", "percent", "source", "selector"),
    ALL,
    ids=[f"{page}:{line}:{shown}" for page, line, shown, *_ in ALL],
)
def test_a_quoted_number_is_its_artifacts(page, line, shown, percent, source, selector):
    where = f"{page}:{line}: {shown} from {source}: {selector}"
    try:
        values = source_values(source, selector)
    except (OSError, KeyError, IndexError, ValueError) as error:
        pytest.fail(f"{where}: the marker's source is missing or unreadable: {error}")
    number = Decimal(shown.replace(",", ""))
    for value in values:
        assert rounded(value, shown, percent) == number, f"{where}: the artifact says {value}"


@pytest.mark.parametrize("path", PAGES, ids=page_name)
def test_every_marker_is_read(path):
    """A comment that names results/ but is not a marker the parser reads (a typo, a space before it) fails."""
    comments = len(ANY_MARKER.findall(prose(path.read_text(encoding="utf-8"))))
    assert comments == sum(1 for page, *_ in ALL if page == page_name(path)), (
        f"{page_name(path)}: a results/ comment does not follow a number directly"
    )


@pytest.mark.parametrize("name", QUOTING)
def test_a_page_that_quotes_results_checks_them(name):
    assert sum(1 for page, *_ in ALL if page == name) >= 3, f"{name} quotes results/ but checks no number"


# ------------------------------------------------------------------------------- sections "numbers from results/"

HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
BARE_NUMBER = re.compile(rf"(?<![\w.,<!-]){NUMBER}(?![\w.,]*\d)")
NUMERIC_CELL = re.compile(r"^[\s\d.,%()/*→~+\-–]*\d[\s\d.,%()/*→~+\-–]*$")


def sections_from_results(text):
    """``(heading, lines)`` of every section whose heading says its numbers come from results/."""
    lines = prose(text).splitlines()
    found = []
    for start, line in enumerate(lines):
        heading = HEADING.match(line)
        if not heading or not re.search(r"numbers from `?results/", heading[2], flags=re.IGNORECASE):
            continue
        level, end = len(heading[1]), len(lines)
        for later in range(start + 1, len(lines)):
            other = HEADING.match(lines[later])
            if other and len(other[1]) <= level:
                end = later
                break
        found.append((heading[2], start + 1, lines[start + 1 : end]))
    return found


def unmarked(text):
    """The numbers in ``text`` that carry no marker (markers and what they name removed first)."""
    rest = MARKER.sub("", text)
    rest = ANY_MARKER.sub("", rest)
    return BARE_NUMBER.findall(rest)


def unmarked_fractions(line):
    """The numbers with decimals (or a %) of a prose line that carry neither a marker nor ``<!-- not from results:
    WHY -->`` right after them: in a section of numbers from results/, a measured or computed figure is one of
    the two, while rooms, counts and other inputs are whole numbers."""
    rest = MARKER.sub("", line)
    rest = re.sub(rf"(?<![\w.,]){NUMBER}\s?%?<!--\s*not from results:.*?-->", "", rest)
    rest = ANY_MARKER.sub("", rest)
    rest = re.sub(r"`[^`]*`", "", rest)
    return re.findall(r"(?<![\w.,-])\d[\d,]*(?:\.\d+(?:\s?%)?|\s?%)(?!\w)", rest)  # not in a name (Qwen2.5-1.5B)


def unmarked_in_section(lines, first):
    problems = []
    rows = []
    for offset, line in enumerate(lines):
        number = first + offset + 1
        stripped = line.strip()
        if stripped.startswith("|"):
            rows.append((number, stripped))
            continue
        if rows:
            problems += unmarked_in_table(rows)
            rows = []
        for bold in re.findall(r"\*\*([^*]+)\*\*(?!<!--)", line):
            if re.fullmatch(rf"\s*{NUMBER}\s*%?\s*", bold):
                problems.append(f"line {number}: **{bold}**")
        problems += [f"line {number}: {found}" for found in unmarked_fractions(line)]
    if rows:
        problems += unmarked_in_table(rows)
    return problems


def unmarked_in_table(rows):
    """Numbers in a table's numeric body cells (not its first column, not its header) without a marker."""
    problems = []
    body = [(n, row) for n, row in rows[2:]] if len(rows) > 1 and set(rows[1][1]) <= set("|:- ") else rows
    for number, row in body:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        for cell in cells[1:]:
            bare = ANY_MARKER.sub("", cell)
            if NUMERIC_CELL.match(bare) and unmarked(cell):
                problems.append(f"line {number}: {cell}")
            elif not NUMERIC_CELL.match(bare):
                for bold in re.findall(r"\*\*([^*]+)\*\*(?!<!--)", cell):
                    if re.fullmatch(rf"\s*{NUMBER}\s*%?\s*", bold):
                        problems.append(f"line {number}: **{bold}**")
    return problems


SECTIONS = [
    (page_name(path), heading, first, lines)
    for path in PAGES
    for heading, first, lines in sections_from_results(path.read_text(encoding="utf-8"))
]


def test_the_pages_that_quote_results_say_so():
    titled = {page for page, *_ in SECTIONS}
    assert set(QUOTING) <= titled, f"pages without a section of numbers from results/: {set(QUOTING) - titled}"


@pytest.mark.parametrize(
    ("page", "heading", "first", "lines"), SECTIONS, ids=[f"{page}:{first}" for page, _, first, _ in SECTIONS]
)
def test_a_section_of_numbers_from_results_marks_them(page, heading, first, lines):
    problems = unmarked_in_section(lines, first)
    assert not problems, f"{page}, {heading!r}: numbers without a marker:\n" + "\n".join(problems)


# ------------------------------------------------------------------------------------------ the checker itself


def test_the_checker_rounds_and_selects():
    assert rounded(0.970665, "0.971", False) == Decimal("0.971")
    assert rounded(0.37338, "37.34", True) == Decimal("37.34")
    assert rounded(48640, "48,640".replace(",", ""), False) == Decimal(48640)
    assert rounded(42.89, "43", False) == Decimal(43)
    assert rounded(0.0125, "0.013", False) == Decimal("0.013")  # half up, not to even
    data = {"rounds": [{"round": "pass1", "x": 1}, {"round": "pass2", "x": [5, 6]}], "a-b": {"50110": 10}}
    assert json_value(data, "rounds[round=pass2].x[1]") == [6]
    assert json_value(data, "a-b.50110") == [10]
    for bad in ("rounds[round=pass3].x", "rounds[5]", "nope", "rounds[round=pass2].x[2]"):
        with pytest.raises((KeyError, IndexError)):
            json_value(data, bad)
    rows = [{"k": "1", "e": "lru", "v": "0.5"}, {"k": "1", "e": "fifo", "v": "0.5"}, {"k": "2", "e": "lru", "v": "1"}]
    assert csv_values(rows, "v where k=1,e=lru/fifo") == ["0.5", "0.5"]
    for bad in ("v where k=1", "v where k=3", "w where k=2", "v where z=1", "v"):
        with pytest.raises(KeyError):
            csv_values(rows, bad)
    line = (
        "**0.971**<!-- results/x.csv: v where k=1 --> and 37.34 %<!-- results/y.json: a -->,"
        " 1,470<!-- results/z.json: c -->"
    )
    assert [(m["shown"], bool(m["percent"])) for m in MARKER.finditer(line)] == [
        ("0.971", False),
        ("37.34", True),
        ("1,470", False),
    ]
    assert unmarked("0.000<!-- results/a.csv: x --> (0.143)") == ["0.143"]
    assert unmarked("0.000<!-- results/a.csv: x --> (0.143<!-- results/a.csv: y -->)") == []
    assert unmarked_fractions("at 21,520 tokens 0.971<!-- results/a.csv: x --> and 0.920 or 3.5% of `1.5`") == [
        "0.920",
        "3.5%",
    ]
    assert unmarked_fractions("1.5<!-- not from results: an input --> GiB") == []
