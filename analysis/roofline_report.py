"""`decodelab report roofline`: a run's timed figures on its machine's roof, as Markdown or one
self-contained HTML page (the chart as SVG); the Roofline page shows the same parts."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis import roofline, roofline_conclusions
from analysis.report_render import STYLE, html_table, in_format, markdown_table, to_svg
from store import frames
from store.store import Store
from store.user_text import markdown_text

TABLE_COLUMNS = {
    "experiment": "experiment",
    "case": "case",
    "side": "side",
    "regime": "regime",
    "level": "level",
    "roof_fraction": "roof fraction",
    "measured_us_per_token": "measured µs/token",
    "predicted_us_per_token": "roofline µs/token",
    "prediction_error": "error",
    "intensity": "flops/byte",
}


@dataclass
class RooflineReport:
    run_id: int
    machine: str
    roof: dict[str, Any] | None
    points: pd.DataFrame
    cases: dict[str, pd.DataFrame] = field(default_factory=dict)
    other_roofs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def conclusions(self) -> list[str]:
        empty = pd.DataFrame()
        return roofline_conclusions.conclusions(
            self.points, self.cases.get("quantization", empty), self.cases.get("speculative", empty), self.machine
        )

    def ceilings(self) -> pd.DataFrame:
        roofs = {self.machine: self.roof, **self.other_roofs} if self.roof is not None else self.other_roofs
        frames_by_machine = [roofline.ceilings(figures, name) for name, figures in roofs.items()]
        return pd.concat(frames_by_machine, ignore_index=True) if frames_by_machine else pd.DataFrame()

    def chart(self) -> Any:
        return roofline.roofline_chart(self.ceilings(), self.points)


def build(store: Store, run_id: int, other_machines: tuple[str, ...] = ()) -> RooflineReport:
    """The run's placed figures and its machine's roof; ``other_machines``' roofs beside it."""
    machine, roof = store.profiles.for_run(run_id)
    cases = {
        experiment: roofline.wide(frames.measurements(store, run_id, experiment))
        for experiment in roofline.placed_experiments()
    }
    placed = [roofline.points(frame, experiment) for experiment, frame in cases.items() if not frame.empty]
    placed = [frame for frame in placed if not frame.empty]
    points = pd.concat(placed, ignore_index=True) if placed else pd.DataFrame(columns=list(TABLE_COLUMNS))
    profiles = store.profiles.by_machine_name()
    others = {name: profiles[name] for name in other_machines if name in profiles and name != machine}
    return RooflineReport(run_id, machine, roof, points, cases, others)


def table_rows(points: pd.DataFrame) -> list[list[str]]:
    rows = []
    for _, row in points.iterrows():
        rows.append(
            [
                str(row["experiment"]),
                str(row["case"]),
                str(row["side"]),
                str(row["regime"]),
                str(row["level"]),
                f"{row['roof_fraction']:.0%}",
                f"{row['measured_us_per_token']:.1f}",
                "withheld" if pd.isna(row["predicted_us_per_token"]) else f"{row['predicted_us_per_token']:.1f}",
                str(row["withheld"]) if pd.isna(row["prediction_error"]) else f"{row['prediction_error']:+.0%}",
                f"{row['intensity']:.2f}",
            ]
        )
    return rows


def to_markdown(report: RooflineReport) -> str:
    roofs = {report.machine: report.roof, **report.other_roofs} if report.roof else report.other_roofs
    header, rows = roofline.roof_rows(roofs)
    lines = [
        f"# decodelab: run {report.run_id} on {markdown_text(report.machine)}'s roofline",
        "",
        *(f"- {markdown_text(sentence)}" for sentence in report.conclusions()),
        "",
        "## Roofs",
        "",
        *markdown_table(header, rows),
        "",
        "## Placed figures",
        "",
        *markdown_table(list(TABLE_COLUMNS.values()), table_rows(report.points)),
    ]
    return "\n".join(lines) + "\n"


def to_html(report: RooflineReport) -> str:
    escape = html.escape
    roofs = {report.machine: report.roof, **report.other_roofs} if report.roof else report.other_roofs
    title = f"decodelab: run {report.run_id} on {report.machine}'s roofline"
    sentences = "".join(f"<li>{escape(sentence)}</li>" for sentence in report.conclusions())
    chart = f"<figure>{to_svg(report.chart())}</figure>" if not report.points.empty else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{escape(title)}</h1>
<ul>{sentences}</ul>
{chart}
<h2>Roofs</h2>
{html_table(*roofline.roof_rows(roofs))}
<h2>Placed figures</h2>
{html_table(list(TABLE_COLUMNS.values()), table_rows(report.points))}
</body></html>
"""


def render(report: RooflineReport, report_format: str) -> str:
    return in_format(report, report_format, to_html, to_markdown)
