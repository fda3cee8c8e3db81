"""The README's "Results at a glance" quotes figures; each must be the figure the linked doc states today.

Every decimal number in a row's figure cell has to appear in the document its "where" cell links to (a
README anchor means the README itself), and the linked heading has to exist: a figure re-measured in the
docs and not in the README, or a section renamed, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NUMBER = re.compile(r"\d+\.\d+")  # decimals: counts such as "5 arms" or "3 rounds" are prose, not figures
LINK = re.compile(r"\]\(([^)#]*)(?:#([^)]*))?\)")


def glance_rows(text: str) -> list[list[str]]:
    """The table rows under the "Results at a glance" heading: each row's cells."""
    section = text.split("## Results at a glance", 1)[1].split("\n## ", 1)[0]
    rows = [
        line
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| what | figure")
    ]
    return [
        [cell.strip() for cell in row.strip("|").split("|")] for row in rows if not set(row) <= set("|- ")
    ]


def anchors(text: str) -> set[str]:
    """GitHub's anchors of a Markdown text's headings (lower case, punctuation dropped, spaces as dashes)."""
    out, fenced = set(), False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        if line.startswith("#") and not fenced:
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_the_glance_table_is_there():
    rows = glance_rows(README.read_text(encoding="utf-8"))
    assert len(rows) >= 6
    assert all(len(r) == 3 for r in rows), rows


def test_every_figure_is_the_one_its_doc_states():
    text = README.read_text(encoding="utf-8")
    missing = []
    for what, figure, where in glance_rows(text):
        link = LINK.search(where)
        assert link, f"row {what!r} links to no document"
        path, anchor = link.groups()
        doc = README if not path else (ROOT / path)
        doc_text = doc.read_text(encoding="utf-8")
        if doc == README:  # the rest of the README, not the table quoting it
            head, rest = doc_text.split("## Results at a glance", 1)
            doc_text = head + rest.split("\n## ", 1)[1]
        if anchor:
            assert anchor in anchors(doc.read_text(encoding="utf-8")), (
                f"row {what!r}: no heading #{anchor} in {doc.name}"
            )
        missing += [(what, n, doc.name) for n in NUMBER.findall(figure) if n not in doc_text]
    assert missing == []


def test_the_check_sees_a_figure_the_docs_do_not_state():
    row = "| the demo | 24.31 → 4321.75 % valid | [docs/loop.md](docs/loop.md#the-demo) |"
    figure = glance_rows(f"## Results at a glance\n\n{row}\n")[0][1]
    doc_text = (ROOT / "docs/loop.md").read_text(encoding="utf-8")
    assert [n for n in NUMBER.findall(figure) if n not in doc_text] == ["4321.75"]
    assert "the-demo" in anchors(doc_text) and "no-such-section" not in anchors(doc_text)
