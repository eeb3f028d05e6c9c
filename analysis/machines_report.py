"""Machines compared, as a file: the fingerprints side by side, the determinism audit and the
matrix of headline figures, as self-contained HTML (nothing requested from any network) or
Markdown. Used by `decodelab report machines` and the Compare page's downloads."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis import machines as machines_module
from analysis import roofline
from analysis.report_render import STYLE, html_table, in_format, markdown_table
from store import frames
from store.store import Store
from store.user_text import markdown_text

MATRIX_NOTE = (
    "Each machine is the run that stands for it (the newest done run of the preset that is not tagged "
    "suspect, unless one was pinned). Values are the run's recorded figure with its min–max band over the "
    "timing pairs where it has one; a ratio divides a machine's value by the reference machine's. Timed "
    "figures on different machines differ by the machines and by each machine's noise: read a ratio against "
    "the bands."
)
ROOFS_NOTE = (
    "Each machine's measured roof (`decodelab machine profile`): peak multiply-add throughput of one core per "
    "precision and read bandwidth per cache level, the best of the repeats."
)
AUDIT_NOTE = (
    "The audit compares every deterministic figure (counts, bytes, seeded acceptance, losses, equality checks) "
    "case by case between machines whose runs used one model and one seed: exactly equal, or listed."
)


@dataclass
class MachinesReport:
    preset: str
    machines: list[str]
    reference: str
    runs: dict[str, int]
    fingerprints: pd.DataFrame
    matrix: pd.DataFrame  # machines.matrix, long
    audit: machines_module.AuditResult
    roofs: dict[str, dict[str, Any]] = field(default_factory=dict)  # measured roofs, by machine

    def wide(self) -> pd.DataFrame:
        return machines_module.wide_matrix(self.matrix, self.machines, self.reference)


def build_machines_report(
    store: Store,
    preset: str,
    machines: Sequence[str],
    *,
    reference: str | None = None,
    pinned: Mapping[str, int] | None = None,
) -> MachinesReport:
    """The comparison of ``machines`` (each through its chosen run of ``preset``); ``reference``
    defaults to the first machine that has a run."""
    runs = frames.runs(store)
    chosen = machines_module.chosen_runs(runs, preset, machines, pinned)
    shown = list(chosen)
    reference = reference if reference in chosen else (shown[0] if shown else "")
    measurements = {machine: frames.measurements(store, run_id) for machine, run_id in chosen.items()}
    details = frames.run_details(store, list(chosen.values()))
    return MachinesReport(
        preset=preset,
        machines=shown,
        reference=reference,
        runs=chosen,
        fingerprints=machines_module.fingerprints(details, shown),
        matrix=machines_module.matrix(measurements, reference),
        audit=machines_module.audit(measurements, details),
        roofs={name: figures for name, figures in store.profiles.by_machine_name().items() if name in chosen},
    )


def title(report: MachinesReport, escape: Callable[[object], str] = str) -> str:
    """The report's title; ``escape`` applies to the machines' names and the preset (the runs' own text)."""
    return f"decodelab: {', '.join(escape(machine) for machine in report.machines)} on {escape(report.preset)}"


def runs_line(report: MachinesReport, escape: Callable[[object], str] = str) -> str:
    return ", ".join(f"{escape(machine)}: run {run_id}" for machine, run_id in report.runs.items())


def frame_table(frame: pd.DataFrame) -> list[str]:
    return markdown_table([str(column) for column in frame.columns], frame.itertuples(index=False))


def to_markdown(report: MachinesReport) -> str:
    fingerprints = report.fingerprints.assign(
        differs=report.fingerprints["differs"].map({True: "**differs**", False: ""})
    )
    return (
        "\n".join(
            [
                f"# {title(report, markdown_text)}",
                "",
                f"- runs: {runs_line(report, markdown_text)}",
                f"- reference machine: {markdown_text(report.reference)}",
                "",
                "## Fingerprints",
                "",
                *frame_table(fingerprints),
                "",
                "## Determinism audit",
                "",
                AUDIT_NOTE,
                "",
                *(
                    f"- {markdown_text(line)}"
                    for line in report.audit.lines() or ["one machine: nothing to audit against"]
                ),
                "",
                "## Headline figures",
                "",
                MATRIX_NOTE,
                "",
                *frame_table(report.wide()),
                "",
                "## Roofs",
                "",
                ROOFS_NOTE,
                "",
                *(markdown_table(*roofline.roof_rows(report.roofs)) if report.roofs else ["no machine profiled"]),
            ]
        )
        + "\n"
    )


def frame_html(frame: pd.DataFrame, marked: Sequence[bool] | None = None) -> str:
    return html_table(list(frame.columns), frame.itertuples(index=False), marked)


def to_html(report: MachinesReport) -> str:
    escape = html.escape
    differs = report.fingerprints["differs"].tolist()
    audit = "".join(f"<li>{escape(line)}</li>" for line in report.audit.lines() or ["one machine: nothing to audit"])
    header, rows = roofline.roof_rows(report.roofs) if report.roofs else ([], [])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title(report))}</title>
<style>{STYLE} tr.differs td {{ background: #fff3cd; }}</style></head>
<body>
<h1>{escape(title(report))}</h1>
<ul><li>runs: {escape(runs_line(report))}</li><li>reference machine: {escape(report.reference)}</li></ul>
<h2>Fingerprints</h2>
<p>Fields that differ between the machines are highlighted.</p>
{frame_html(report.fingerprints.drop(columns=["differs"]), differs)}
<h2>Determinism audit</h2>
<p>{escape(AUDIT_NOTE)}</p>
<ul>{audit}</ul>
<h2>Headline figures</h2>
<p>{escape(MATRIX_NOTE)}</p>
{frame_html(report.wide())}
<h2>Roofs</h2>
<p>{escape(ROOFS_NOTE)}</p>
{html_table(header, rows) if report.roofs else "<p>no machine profiled</p>"}
</body></html>
"""


def render(report: MachinesReport, report_format: str) -> str:
    return in_format(report, report_format, to_html, to_markdown)
