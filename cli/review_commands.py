"""The review commands: `decodelab runs`, `decodelab tag`, `decodelab note`, `decodelab report run`
and `decodelab report machines`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.options import DbOption, open_store
from runner.errors import InputError
from store.files import check_output_file, write_text_whole

if TYPE_CHECKING:
    import pandas as pd

    from store.store import Store

OutOption = Annotated[Path, typer.Option("--out", help="The file to write (FILE.html or FILE.md).")]
RunOutOption = Annotated[
    Path, typer.Option("--out", help="The file to write (FILE.html or FILE.md), or - for stdout (with --format md).")
]
# The verdicts a CI job may fail on (`--fail-on`), and `underpowered`: the review has tested
# timed rows that could not have seen a 25% change (analysis.review_lines.power_line).
GATE_VERDICTS = ("regressed", "changed", "improved", "unknown drift", "underpowered")
FormatOption = Annotated[
    str | None, typer.Option("--format", help="html or md (default: from the file's suffix, else html).")
]
RunOption = Annotated[int, typer.Option("--run", help="The run's id (`decodelab runs` lists them).")]


def check_run(store: Store, run_id: int) -> None:
    if not store.results.run_exists(run_id):
        raise InputError(f"--run: no run {run_id} in {store.masked_url}")


def runs(
    db: DbOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100_000, help="Show this many, newest first.")] = 20,
) -> None:
    """List the store's runs, newest first: id, start (UTC), status, machine, sweep, code, seconds, tags."""
    store = open_store(db, "runs", read_only=True)
    # pandas comes with frames: loaded once the store is open, so a refused command never pays it.
    import pandas as pd

    from analysis.runs import sweep_labels
    from store import frames
    from store.user_text import for_terminal

    listed = frames.runs(store)
    if listed.empty:
        typer.echo(f"no run in {store.masked_url} yet (`decodelab run --preset quick` makes one)")
        return
    shown = listed.head(limit)
    # Widths in characters; the text a run brought (machine, tags) made safe for a terminal.
    columns = (("run", 5), ("started (UTC)", 16), ("status", 11), ("machine", 16), ("sweep", 24), ("code", 28))
    typer.echo("  ".join(f"{name:<{width}}" for name, width in columns) + f"  {'seconds':>8}  tags")
    for row, sweep in zip(shown.to_dict("records"), sweep_labels(shown), strict=True):
        cells = (row["run_id"], str(row["started_at"])[:16], row["status"], row["machine"], sweep, row["code_version"])
        text = "  ".join(
            f"{for_terminal('' if cell is None else cell)[:width]:<{width}}"
            for cell, (_, width) in zip(cells, columns, strict=True)
        )
        seconds = f"{row['wall_seconds']:.0f}" if pd.notna(row["wall_seconds"]) else ""
        typer.echo(f"{text}  {seconds:>8}  {for_terminal(row['tags'] or '')}")
    if len(listed) > limit:
        typer.echo(f"… {len(listed) - limit} older run(s) not shown (--limit)")


def tag(
    name: Annotated[
        str, typer.Argument(help="baseline, reviewed, suspect, or a free name (not ab: or rev:, which ab writes).")
    ],
    run_id: RunOption,
    remove: Annotated[bool, typer.Option("--remove", help="Take the tag off instead.")] = False,
    db: DbOption = None,
) -> None:
    """Tag a run: `baseline` pins it as later runs' baseline, `suspect` leaves it out of baselines.

    `baseline` pins the run as the baseline of later runs of its preset on its machine; `suspect`
    leaves it out of baselines and change detection."""
    store = open_store(db, "tag", creates=False)
    check_run(store, run_id)
    if remove:
        removed = store.annotations.remove_tag(run_id, name)
        typer.echo(f"run {run_id}: tag {name} {'removed' if removed else 'was not there'}")
    else:
        from store.annotations import check_new_tag

        check_new_tag(name)
        added = store.annotations.add_tag(run_id, name)
        typer.echo(f"run {run_id}: tagged {name}{'' if added else ' (already)'}")


def note(
    text: Annotated[str, typer.Argument(help="The note; an empty text removes it.")],
    run_id: RunOption,
    db: DbOption = None,
) -> None:
    """Set a run's note (replacing the one it had)."""
    store = open_store(db, "note", creates=False)
    check_run(store, run_id)
    store.annotations.set_note(run_id, text)
    typer.echo(f"run {run_id}: note {'set' if text.strip() else 'removed'}")


def checked_format(out: Path, report_format: str | None) -> str:
    """The report's format (given, else from the file's suffix), refused before anything is read."""
    from analysis.formats import REPORT_FORMATS

    chosen = report_format or ("md" if out.suffix.lower() == ".md" else "html")
    if chosen not in REPORT_FORMATS:
        raise InputError(f"--format: {chosen!r} is not a report format (allowed: html, md)")
    if str(out) == "-":
        if chosen != "md":
            raise InputError("--out: - (stdout) needs --format md (allowed: a file, or - with --format md)")
        return chosen
    check_output_file(out)
    return chosen


def write_file(out: Path, text: str) -> None:
    """Written whole or not at all: a reader never finds half a report."""
    write_text_whole(out, text)


def checked_gate(fail_on: str | None) -> list[str]:
    """The verdicts named by ``--fail-on``, each checked."""
    if fail_on is None:
        return []
    names = [name.strip() for name in fail_on.split(",") if name.strip()]
    unknown = [name for name in names if name not in GATE_VERDICTS]
    if unknown or not names:
        raise InputError(
            f"--fail-on: {', '.join(map(repr, unknown)) or 'nothing given'} (allowed: a comma-separated list of "
            f"{', '.join(GATE_VERDICTS)})"
        )
    return names


def report_run(
    run_id: RunOption,
    out: RunOutOption,
    baseline_id: Annotated[
        int | None,
        typer.Option(
            "--baseline",
            help="The run to compare against (default: the pinned or previous done run of the same preset on "
            "the same machine).",
        ),
    ] = None,
    report_format: FormatOption = None,
    all_metrics: Annotated[
        bool, typer.Option("--all-metrics", help="Every metric, not only the headline ones.")
    ] = False,
    calibration: Annotated[
        bool,
        typer.Option(
            "--calibration/--no-calibration",
            help="With the calibration line: this machine's measured error rates of the verdicts, seconds of "
            "re-judging its earlier runs (most of a report's time). --no-calibration leaves it out and says so.",
        ),
    ] = True,
    fail_on: Annotated[
        str | None,
        typer.Option(
            "--fail-on",
            help="Exit 1 when any row has one of these verdicts, e.g. regressed,changed (a CI gate); "
            "underpowered: when some tested timed row could not have seen a 25% change.",
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """A run against its baseline: the verdict table (and, in HTML, the key charts) in one file.

    With --fail-on, exits 1 when a listed verdict stands (0 otherwise, 2 for bad input)."""
    chosen_format = checked_format(out, report_format)
    gate = checked_gate(fail_on)
    store = open_store(db, "report run", read_only=True)
    check_run(store, run_id)
    # The report's code (pandas, the statistics) is loaded once the input is known good.
    from analysis import report, report_render, review, review_host, review_lines
    from store import frames

    runs = frames.runs(store)
    known = set(runs["run_id"].tolist())
    if baseline_id is None:
        baseline_id = review.default_baseline(runs, run_id)
        if baseline_id is None:
            raise InputError(
                f"--baseline: run {run_id} has no earlier done run of its preset on its machine to compare with; "
                "give --baseline RUN"
            )
    elif baseline_id not in known:
        raise InputError(f"--baseline: no run {baseline_id} in {store.masked_url}")
    if baseline_id == run_id:
        raise InputError(f"--baseline: {baseline_id} is the run itself (allowed: any other run)")
    built = report.build_report(store, run_id, baseline_id, headline_only=not all_metrics, calibrated=calibration)
    if not calibration:
        built.calibration = report.CALIBRATION_LEFT_OUT
    power, detectable = review_lines.power_line(built.table), review_lines.detectable_line(built.table)
    summary = f"run {run_id} against baseline {baseline_id}: {review_lines.summary_line(built.table)}"
    if detectable:
        summary = f"{summary}; {detectable}"
    if power:
        summary = f"{summary}; {power}"
    if waiting := review_lines.waiting_line(built.table):
        summary = f"{summary}; {waiting}"
    if stepped := review_host.host_line(built.table):
        summary = f"{summary}; {stepped}"
    if phased := review_host.phase_line(built.table):
        summary = f"{summary}; {phased}"
    if str(out) == "-":
        typer.echo(report_render.render(built, chosen_format), nl=False)
        typer.echo(summary, err=True)  # stdout holds the comment alone
    else:
        write_file(out, report_render.render(built, chosen_format))
        typer.echo(f"wrote {out}: {summary}")
    standing = sorted(set(gate) & set(built.table["verdict"]) if not built.table.empty else set())
    counts = review_lines.verdict_counts(built.table)
    reasons = [f"{counts[name]} {name}" for name in standing]
    if "underpowered" in gate and power:
        reasons.append(f"underpowered ({len(review_lines.underpowered_rows(built.table))} rows could not see 25%)")
    if reasons:
        seen = f" ({detectable})" if detectable else ""
        typer.echo(f"--fail-on: {', '.join(reasons)}{seen}", err=True)
        raise typer.Exit(1)


def report_machines(
    out: OutOption,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset",
            help="The preset whose runs are compared, custom for runs of a spec file (default: the one run on "
            "most machines).",
        ),
    ] = None,
    machine_names: Annotated[
        str | None,
        typer.Option("--machines", help="Comma-separated machine names (default: every machine with a done run)."),
    ] = None,
    reference: Annotated[
        str | None, typer.Option("--reference", help="The machine ratios divide by (default: the first).")
    ] = None,
    pins: Annotated[
        list[str] | None,
        typer.Option(
            "--pin", metavar="MACHINE=RUN", help="Compare that run instead of the machine's newest (repeatable)."
        ),
    ] = None,
    report_format: FormatOption = None,
    db: DbOption = None,
) -> None:
    """Machines side by side: fingerprints, a determinism audit and every headline figure, in one file.

    Each headline figure comes with its band and its ratio to a reference machine."""
    chosen_format = checked_format(out, report_format)
    store = open_store(db, "report machines", read_only=True)
    # Loaded once the store is open: a refused command never needs pandas or the reports.
    from analysis import machines, machines_report
    from store import frames

    runs = frames.runs(store)
    presets = machines.presets_by_machines(runs)
    if not presets:
        raise InputError(f"--preset: {store.masked_url} holds no done run to compare")
    preset = preset or presets[0]
    if preset not in presets:
        raise InputError(f"--preset: no done run of {preset!r} (allowed: {', '.join(presets)})")
    available = sorted(machines.candidate_runs(runs, preset)["machine"].unique())
    chosen = [name.strip() for name in machine_names.split(",") if name.strip()] if machine_names else available
    unknown = [name for name in chosen if name not in available]
    if unknown or not chosen:
        raise InputError(
            f"--machines: no done run of {preset} on {', '.join(unknown) or 'any machine given'} "
            f"(allowed: {', '.join(available)})"
        )
    if reference is not None and reference not in chosen:
        raise InputError(f"--reference: {reference!r} is not among the machines compared ({', '.join(chosen)})")
    pinned = parse_pins(pins or [], runs, preset, chosen)
    built = machines_report.build_machines_report(store, preset, chosen, reference=reference, pinned=pinned)
    write_file(out, machines_report.render(built, chosen_format))
    audit = "; ".join(built.audit.lines()) or "one machine, nothing audited"
    typer.echo(f"wrote {out}: {machines_report.runs_line(built)}; audit: {audit}")


def parse_pins(pins: list[str], runs: pd.DataFrame, preset: str, chosen: list[str]) -> dict[str, int]:
    """``MACHINE=RUN`` pins, each checked to name a done run of the preset on that machine."""
    from analysis import machines

    candidates = machines.candidate_runs(runs, preset)
    pinned: dict[str, int] = {}
    for pin in pins:
        machine, _, run = pin.partition("=")
        if machine not in chosen or not run.isdigit():
            raise InputError(f"--pin: {pin!r} is not MACHINE=RUN with MACHINE one of {', '.join(chosen)}")
        own = candidates[candidates["machine"] == machine]["run_id"].tolist()
        if int(run) not in own:
            raise InputError(
                f"--pin: run {run} is not a done {preset} run on {machine} (allowed: {', '.join(map(str, own))})"
            )
        pinned[machine] = int(run)
    return pinned
