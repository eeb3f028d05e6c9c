"""A built review (analysis.report.RunReport) as a file to paste into a review: one
self-contained HTML page (the verdict table and the key charts, drawn to inline SVG by
vl-convert: opening it requests nothing from any network) or the same verdict table as Markdown
for a pull request.

Text only, no reading of the store: the run's lines, the verdict table's cells, the verdicts'
meanings and their anchors. The pieces every offline report shares (STYLE, markdown_table,
to_svg) live here too; analysis.machines_report and analysis.roofline_report use them.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd

from analysis import between_runs, review, review_charts, review_lines, review_timed, tables
from analysis.figures import Figure
from analysis.formats import REPORT_FORMATS
from analysis.runs import sweep_label
from store.user_text import flatten_lines, markdown_cell, markdown_plain, markdown_text, xml_safe

if TYPE_CHECKING:
    # The type only: rendering needs none of the store-reading modules analysis.report loads.
    from analysis.report import RunReport


Report = TypeVar("Report")


def describe(run: Mapping[Any, Any], escape: Callable[[object], str] = str) -> str:
    """The run in one line; ``escape`` applies to the text a run brought (machine name, preset,
    status, tags: an imported run chose them all)."""
    started = pd.Timestamp(run["started_at"]).strftime("%Y-%m-%d %H:%M")
    tags = f" · tags: {escape(run['tags'])}" if run.get("tags") else ""
    machine = escape(run["machine"])
    sweep = escape(sweep_label(run.get("preset"), run.get("spec")))
    return f"run {run['run_id']} · {machine} · {sweep} · {escape(run['status'])} · {started}{tags}"


def anchor(verdict: str) -> str:
    """The in-page anchor of a verdict's meaning: ``verdict-unknown-drift``."""
    return "verdict-" + verdict.replace(" ", "-")


def linked_counts(counts: Mapping[str, int]) -> str:
    """The verdict counts as Markdown, each verdict word a link to its meaning."""
    return ", ".join(f"{count} [{verdict}](#{anchor(verdict)})" for verdict, count in counts.items()) or (
        "nothing to compare"
    )


def meanings_markdown() -> str:
    """Each verdict's meaning as a Markdown list whose items carry the anchors of ``anchor``."""
    return "\n".join(
        f'- <a id="{anchor(verdict)}"></a>**{verdict}**: {meaning}'
        for verdict, meaning in review.VERDICT_MEANINGS.items()
    )


def formatted(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def value_in_unit(row: Mapping[Any, Any], side: str) -> str:
    """A side's value as the tables write it in the row's unit (4.965 µs, 1.18 MiB, 12,345), empty
    where the side has none."""
    value = row[side]
    if tables.is_missing(value):
        return ""
    return tables.value_text(value, row.get("unit") if isinstance(row.get("unit"), str) else None)


def change_text(change: Any) -> str:
    return "" if change is None or pd.isna(change) else f"{change:+.1%}"


def one_line_row(row: Mapping[Any, Any]) -> str:
    """A verdict row in words: ``regressed · speculative · speedup_median · draft=bigram: 1.3 → 1.1 (-15.4%)``."""
    change = change_text(row["change"])
    return (
        f"{row['verdict']} · {row['experiment']} · {row['metric']} · {row['point']}: "
        f"{value_in_unit(row, 'baseline')} → {value_in_unit(row, 'run')}{f' ({change})' if change else ''}"
    )


def table_cells(table: pd.DataFrame) -> list[list[str]]:
    rows = []
    for row in table.to_dict("records"):
        change = change_text(row["change"])
        rows.append(
            [
                review_lines.verdict_label(row),
                row["experiment"],
                row["metric"],
                row["point"],
                value_in_unit(row, "baseline"),
                value_in_unit(row, "run"),
                change,
                formatted(row["p_value"], 2),
                formatted(row["adjusted_p"], 2),
                "" if pd.isna(row["noise_floor"]) else f"±{math.expm1(row['noise_floor']):.1%}",
                "" if pd.isna(row["detectable"]) else review.seen(float(row["detectable"]), ".1%"),
                str(row["why"] or ""),
            ]
        )
    return rows


HEADER = [
    "verdict",
    "experiment",
    "metric",
    "point",
    "baseline",
    "run",
    "change",
    "p",
    "adjusted p",
    "noise floor",
    "would have seen",
    "why",
]
METHOD = (
    f"Deterministic metrics must be equal. Timed metrics: a two-sample t test of the shift of the mean log value "
    f"(per-pair ratios for paired speedups, seconds for min-of-N times), its variance moderated towards the typical "
    f"one of the row's experiment and impl ({review.PRIOR_FREEDOM} prior degrees of freedom), its p-values adjusted "
    f"by Benjamini–Hochberg within each experiment · impl family and compared with {review.ALPHA:g} (the false "
    f"discovery rate controlled within each family); given {between_runs.MIN_EARLIER_RUNS} or more earlier done runs "
    f"of the preset on this machine, a shift must also clear the between-run floor (the case's robust run-to-run "
    f"standard deviation over them, the newest {review.HISTORY_WINDOW}, moderated towards its experiment · metric · "
    f"impl group's median with {between_runs.BETWEEN_PRIOR_FREEDOM} prior degrees of freedom where the group has "
    f"{between_runs.MIN_PRIOR_CASES} such cases, else its experiment · metric's over every impl, else every "
    f"case's, times t(1 − {between_runs.FLOOR_ALPHA:g}/2) on "
    f"those and their count less one degrees of freedom times √2, so that an unchanged case crosses it with chance "
    f"about {between_runs.FLOOR_ALPHA:g}, up to twice that on two runs), or, for a ratio moving the same way as the "
    f"median of its experiment · metric · impl group where that median is beyond the group's own floor (its level's "
    f"run-to-run spread, the same way), that lower floor; with fewer, a paired ratio's shift within "
    f"the machine's drift figure (else ±{math.expm1(review.DEFAULT_DRIFT):.0%}) is unknown drift, and a min-of-N "
    f"time (absolute seconds) is at most unknown drift. Where {review_timed.RUN_WIDE_MIN_ROWS} or more paired ratios "
    f"moved beyond ±{math.expm1(review_timed.RUN_WIDE_ALLOWANCE):.0%} together (their median: the whole run moved), "
    f"the rows moving with them, min-of-N times too, are judged against "
    f"±{math.expm1(review_timed.RUN_WIDE_ALLOWANCE):.0%} where their floor or drift allowance is wider. Each tested "
    f"row says the smallest change it would have seen "
    f"({review.MDE_POWER:.0%} power, moving alone in its family, never below its floor); a review with rows that "
    f"could not see {review.UNDERPOWERED_CHANGE:.0%} says it is underpowered."
)


def to_markdown(report: RunReport) -> str:
    lines = [
        f"# decodelab: run {report.run['run_id']} against baseline {report.baseline['run_id']}",
        "",
        # What the review could see comes first: "0 regressed" below means nothing beyond it.
        f"**{review_lines.seen_line(report.table)}**",
        "",
        *([f"**{power}**", ""] if (power := review_lines.power_line(report.table)) else []),
        f"- run: {describe(report.run, markdown_text)}",
        f"- baseline: {describe(report.baseline, markdown_text)}",
        f"- verdicts: {verdicts_markdown(report.table)}",
        f"- A/A spread: {floors_line(report.floors)}",
        *([f"- calibration: {report.calibration}"] if report.calibration else []),
        *([f"- drift: {markdown_text(report.machine_drift)}"] if report.machine_drift else []),
        *(f"- warning: {warning}" for warning in report.warnings),
        *([f"- note: {markdown_text(report.run['note'])}"] if report.run.get("note") else []),
        # A pull request's Markdown cannot hold the SVG charts: said, rather than drawn badly.
        *([f"- charts: {len(report.charts)} in the HTML report (`--format html`)"] if report.charts else []),
        "",
        METHOD,
        "",
        *markdown_table(HEADER, table_cells(report.table), linked_first=True),
        "",
        "## What each verdict means",
        "",
        meanings_markdown(),
    ]
    return "\n".join(lines) + "\n"


def verdicts_markdown(table: pd.DataFrame) -> str:
    """The summary line, its verdict words linked to their meanings (two runs sharing no case: said so)."""
    return (
        review_lines.summary_line(table)
        if review_lines.shares_no_case(table)
        else linked_counts(review_lines.verdict_counts(table))
    )


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], *, linked_first: bool = False) -> list[str]:
    """A Markdown table's lines, each cell kept to one line with no markup (store.user_text);
    ``linked_first``: the first cell is a verdict word (a fixed vocabulary), linked to its meaning."""
    lines = ["| " + " | ".join(markdown_cell(name) for name in header) + " |", "|" + "---|" * len(header)]
    for cells in rows:
        shown = [markdown_cell(cell) for cell in cells]
        verdict = verdict_word(cells[0]) if linked_first and cells else None
        if verdict is not None:
            shown[0] = f"[{verdict}](#{anchor(verdict)}){markdown_cell(cells[0][len(verdict) :])}"
        lines.append("| " + " | ".join(shown) + " |")
    return lines


def verdict_word(label: str) -> str | None:
    """The verdict a label (``within noise (would have seen ≥ 8%)``) starts with, if any."""
    return next((verdict for verdict in review.VERDICT_ORDER if label.startswith(verdict)), None)


def floors_line(floors: dict[tuple[str, str, str], float]) -> str:
    """The widest |log ratio| of an A/A pair per experiment and impl: what the clock alone did."""
    if not floors:
        return "no A/A case in either run"
    return ", ".join(
        f"{markdown_text(experiment)} · {markdown_text(impl)}{' (min-of-N)' if method == 'min' else ''} "
        f"±{math.expm1(floor):.1%}"
        for (experiment, impl, method), floor in sorted(floors.items())
    )


def to_svg(chart: Figure) -> str:
    """The chart as inline SVG; one line in its place where it cannot be drawn.

    Every text in the chart is made XML-safe first: vl-convert parses each label inside an SVG to
    measure it, and a character XML cannot hold (BEL, ESC, NUL) made that parse panic in Rust code
    that cannot unwind, which aborted the whole process (the dashboard's server with it) rather
    than raising. Labels are cleaned where they enter the store; this covers a store written
    before that."""
    import vl_convert

    try:
        return str(vl_convert.vegalite_to_svg(xml_safe(chart.to_dict())))
    except Exception as error:  # any failure to draw is shown in the chart's place, never fatal to the report
        reason = flatten_lines(str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
        return f'<p class="warning">this chart could not be drawn: {html.escape(reason[:200])}</p>'


STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
td.verdict { font-weight: bold; }
.warning { color: #b35900; }
/* The "why" column (the last) wide enough to read in a few lines, not one word a line. */
td:last-child { min-width: 36em; }
"""


def to_html(report: RunReport) -> str:
    """One page with everything inline: styles, tables and the charts as SVG."""
    escape = html.escape
    rows = []
    for cells in table_cells(report.table):
        verdict = verdict_word(cells[0]) or cells[0]
        color = review_charts.VERDICT_COLORS.get(verdict, "#000")
        rows.append(
            f'<tr><td class="verdict"><a style="color:{color}" href="#{anchor(verdict)}">{escape(verdict)}</a>'
            f"{escape(cells[0][len(verdict) :])}</td>"
            + "".join(f"<td>{escape(cell)}</td>" for cell in cells[1:])
            + "</tr>"
        )
    title = f"decodelab: run {report.run['run_id']} against baseline {report.baseline['run_id']}"
    notes = [f"<li class='warning'>warning: {escape(markdown_plain(warning))}</li>" for warning in report.warnings]
    if report.run.get("note"):
        notes.append(f"<li>note: {escape(str(report.run['note']))}</li>")
    charts = "".join(f"<figure>{to_svg(chart)}</figure>" for chart in report.charts)
    meanings = "".join(
        f'<li id="{anchor(verdict)}"><b>{escape(verdict)}</b>: {escape(meaning)}</li>'
        for verdict, meaning in review.VERDICT_MEANINGS.items()
    )
    seen_class = " class='warning'" if review_lines.cannot_see(report.table) else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{escape(title)}</h1>
<p{seen_class}><b>{escape(review_lines.seen_line(report.table))}</b></p>
{f"<p class='warning'><b>{escape(power)}</b></p>" if (power := review_lines.power_line(report.table)) else ""}
<ul>
<li>run: {escape(describe(report.run))}</li>
<li>baseline: {escape(describe(report.baseline))}</li>
<li>verdicts: {verdicts_html(report.table)}</li>
<li>A/A spread: {escape(markdown_plain(floors_line(report.floors)))}</li>
{f"<li>calibration: {escape(markdown_plain(report.calibration))}</li>" if report.calibration else ""}
{f"<li>drift: {escape(report.machine_drift)}</li>" if report.machine_drift else ""}
{"".join(notes)}
</ul>
<p>{escape(METHOD)}</p>
{charts}
<table><thead><tr>{"".join(f"<th>{escape(name)}</th>" for name in HEADER)}</tr></thead>
<tbody>{"".join(rows)}</tbody></table>
<h2>What each verdict means</h2>
<ul>{meanings}</ul>
</body></html>
"""


def verdicts_html(table: pd.DataFrame) -> str:
    """The summary line with each verdict word a link to its meaning."""
    if review_lines.shares_no_case(table):
        return html.escape(review_lines.summary_line(table))
    counts = review_lines.verdict_counts(table)
    return (
        ", ".join(
            f'{count} <a href="#{anchor(verdict)}">{html.escape(verdict)}</a>' for verdict, count in counts.items()
        )
        or "nothing to compare"
    )


def html_table(header: Sequence[Any], rows: Iterable[Sequence[Any]], marked: Sequence[bool] | None = None) -> str:
    """A table of every report's HTML, each cell escaped; the rows ``marked`` carry the class
    ``differs`` (the machines report's highlighted fields)."""
    head = "".join(f"<th>{html.escape(str(name))}</th>" for name in header)
    body = []
    for index, row in enumerate(rows):
        css = ' class="differs"' if marked is not None and marked[index] else ""
        body.append(f"<tr{css}>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def in_format(
    report: Report, report_format: str, html_of: Callable[[Report], str], markdown_of: Callable[[Report], str]
) -> str:
    """Any report as ``report_format`` (one of REPORT_FORMATS): HTML or Markdown."""
    if report_format not in REPORT_FORMATS:
        raise ValueError(f"format must be one of {REPORT_FORMATS}, got {report_format!r}")
    return html_of(report) if report_format == "html" else markdown_of(report)


def render(report: RunReport, report_format: str) -> str:
    """The report as ``report_format`` (one of REPORT_FORMATS): HTML or Markdown."""
    return in_format(report, report_format, to_html, to_markdown)
