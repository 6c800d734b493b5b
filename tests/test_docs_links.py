"""The README and docs/ point only at things that exist: every relative link names a file of the
checkout, and every ``#anchor`` a heading of the page it names (GitHub's heading slugs). Pages other
sessions are still writing (``PENDING``) may be absent; once they exist they are checked like the rest."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PENDING = {"docs/python-api.md"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)   # '# comments' in code blocks are no headings
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """The links of ``page`` (its text, or ``text`` read as if it stood there) that lead nowhere."""
    out = []
    text = re.sub(r"```.*?```", "", page.read_text() if text is None else text, flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue   # http(s), mailto
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
        if not dest.exists():
            if rel not in PENDING:
                out.append(f"{page.relative_to(ROOT)}: {target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{page.relative_to(ROOT)}: {target}: no heading #{anchor}")
    return out


def test_every_link_resolves():
    bad = [b for p in PAGES for b in broken_links(p)]
    assert bad == []


def test_the_check_fails_on_a_broken_link():
    assert slug("Output and errors (the contract)") == "output-and-errors-the-contract"
    assert slug("Cora (public split), settings chosen by `gnnprep tune` on validation only") == \
        "cora-public-split-settings-chosen-by-gnnprep-tune-on-validation-only"
    page = ROOT / "docs" / "index.md"
    text = page.read_text() + "\n[x](nowhere.md) [y](cli.md#no-such-heading) [z](../README.md#a-tour-in-five-commands)\n"
    assert broken_links(page, text) == ["docs/index.md: nowhere.md: no such file",
                                        "docs/index.md: cli.md#no-such-heading: no heading #no-such-heading"]


def test_the_readme_stays_short():
    """Issue 25: a short README, the rest in docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
