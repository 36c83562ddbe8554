"""Summary table: problems first, aligned columns, counts and verdict last, colour on request."""

from __future__ import annotations

from nodegate.report import NodeReport, render_summary
from nodegate.report.summary import format_threshold


def _rows(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("VERDICT"))
    return lines[start + 2 : lines.index("", start)]


def test_problems_first_then_passes(report: NodeReport) -> None:
    rows = _rows(render_summary(report))
    assert len(rows) == len(report.results)
    assert [row.split()[0] for row in rows[:4]] == ["FAIL", "ERROR", "WARN", "SKIP"]
    assert rows[0].split()[1:3] == ["nvlink_state", "gpu3.link5"]
    assert all(row.startswith("PASS") for row in rows[4:])


def test_columns_are_aligned(report: NodeReport) -> None:
    text = render_summary(report)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("VERDICT"))
    for column in ("CHECK", "ENTITY", "MEASURED"):
        offset = header.index(column)
        for row in _rows(text):
            assert row[offset - 2 : offset] == "  " and row[offset] != " ", (column, row)


def test_footer_counts_verdict_and_exit(report: NodeReport) -> None:
    last = render_summary(report).rstrip("\n").splitlines()[-1]
    assert last == (
        "165 results: 1 FAIL, 1 ERROR, 1 WARN, 1 SKIP, 161 PASS. Node verdict: FAIL (exit 1)"
    )


def test_cells_and_notes(report: NodeReport) -> None:
    rows = _rows(render_summary(report))
    warn = next(row for row in rows if row.startswith("WARN"))
    assert "321.4" in warn and ">= 335" in warn  # the threshold's source is left to the JSON
    assert "below peer-tool floor" in warn
    fail = rows[0]
    assert "false" in fail and "hardware" in fail and "NVLink 5 on GPU 3 is inactive" in fail


def test_plain_by_default_colour_on_request(report: NodeReport) -> None:
    assert "\x1b[" not in render_summary(report)
    coloured = render_summary(report, color=True)
    assert "\x1b[1;31mFAIL" in coloured
    assert coloured.rstrip().endswith("\x1b[1;31mFAIL\x1b[0m (exit 1)")


def test_hide_passed_keeps_counts(report: NodeReport) -> None:
    text = render_summary(report.to_dict(), show_passed=False)
    assert len(_rows(text)) == 4
    assert "161 PASS" in text


def test_format_threshold() -> None:
    assert format_threshold({"min": 335}) == ">= 335"
    assert format_threshold({"max": 0}) == "<= 0"
    assert format_threshold({"min": 10, "max": 20.5}) == "10..20.5"
    assert format_threshold(None) == "-"
    assert format_threshold("Gen5 x16") == "Gen5 x16"
    assert format_threshold({"min": 238, "source": "peer-tool: x"}) == ">= 238"
    assert format_threshold({"mode": "Default"}) == '{"mode":"Default"}'
