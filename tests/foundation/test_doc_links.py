"""Every ``docs/...md`` a file names exists (the developer logs moved to docs/dev/: nothing may
point at their old place), and the operators' docs carry no notes about how they were made
("this session", "the brief")."""

from __future__ import annotations

import re

from tests.conftest import ROOT
from tests.foundation.test_tracker_free import _files

DOC_PATH = re.compile(r"\bdocs/[A-Za-z0-9_][A-Za-z0-9_./-]*?\.md\b")
#: Notes about the process that made a page, not about the product.
PROCESS_NOTE = re.compile(r"\bthis session\b|\bthe brief\b|\bthe session's\b", re.IGNORECASE)
DEVELOPER_LOGS = ("testing.md", "benchmarks.md", "md-rehearsal.md", "CONTRACTS-dev.md")


def test_every_named_doc_exists() -> None:
    missing = []
    for path in _files():
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for match in DOC_PATH.finditer(line):
                name = match.group()
                if "github.com/" in line[:match.start()]:  # an upstream project's page
                    continue
                if not (ROOT / name).is_file():
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {name}")
    assert not missing, "\n".join(missing)


def test_the_developer_logs_live_in_docs_dev() -> None:
    for name in DEVELOPER_LOGS:
        assert (ROOT / "docs" / "dev" / name).is_file() and not (ROOT / "docs" / name).exists()


def test_operator_docs_hold_no_process_notes() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    hits = [f"{page.relative_to(ROOT)}:{n}: {line.strip()[:80]}" for page in pages
            for n, line in enumerate(page.read_text().splitlines(), 1)
            if PROCESS_NOTE.search(line)]
    assert len(pages) > 15 and not hits, "\n".join(hits)


def test_the_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    pages = [*sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "dev").glob("*.md")),
             ROOT / "docs" / "hardware-runs" / "README.md"]
    unlisted = [str(p.relative_to(ROOT)) for p in pages
                if p.name != "index.md" and str(p.relative_to(ROOT)) not in index]
    assert not unlisted, unlisted


def test_the_readmes_role_list_is_the_deploys() -> None:
    """README.md names every role deploy.py runs (read from its ROLES, not typed here)."""
    import ast

    tree = ast.parse((ROOT / "deploy.py").read_text())
    (roles,) = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "ROLES" for t in node.targets)]
    assert isinstance(roles, ast.Tuple)
    names = [element.id for element in roles.elts if isinstance(element, ast.Name)]
    readme = " ".join((ROOT / "README.md").read_text().split())
    match = re.search(r"Roles \(docs/roles\.md\)(.*?)every knob", readme)
    assert match is not None and len(names) >= 8
    missing = [name for name in names if f"`{name}`" not in match.group(1)]
    assert not missing, missing
