"""The review commands: `decodelab tag`, `decodelab note` and `decodelab report run`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from runner.cli_options import DbOption, open_store
from runner.errors import InputError

if TYPE_CHECKING:
    from store.store import Store

RunOption = Annotated[
    int, typer.Option("--run", help="The run's id (see the dashboard's History or `decodelab workers`).")
]


def check_run(store: Store, run_id: int) -> None:
    if not store.results.run_exists(run_id):
        raise InputError(f"--run: no run {run_id} in {store.masked_url}")


def tag(
    name: Annotated[str, typer.Argument(help="baseline, reviewed, suspect, or a free name.")],
    run_id: RunOption,
    remove: Annotated[bool, typer.Option("--remove", help="Take the tag off instead.")] = False,
    db: DbOption = None,
) -> None:
    """Tag a run: `baseline` pins it as the baseline of later runs of its preset on its machine,
    `suspect` leaves it out of baselines and change detection."""
    store = open_store(db, "tag")
    check_run(store, run_id)
    if remove:
        removed = store.annotations.remove_tag(run_id, name)
        typer.echo(f"run {run_id}: tag {name} {'removed' if removed else 'was not there'}")
    else:
        added = store.annotations.add_tag(run_id, name)
        typer.echo(f"run {run_id}: tagged {name}{'' if added else ' (already)'}")


def note(
    text: Annotated[str, typer.Argument(help="The note; an empty text removes it.")],
    run_id: RunOption,
    db: DbOption = None,
) -> None:
    """Set a run's note (replacing the one it had)."""
    store = open_store(db, "note")
    check_run(store, run_id)
    store.annotations.set_note(run_id, text)
    typer.echo(f"run {run_id}: note {'set' if text.strip() else 'removed'}")


def report_run(
    run_id: RunOption,
    out: Annotated[Path, typer.Option("--out", help="The file to write (FILE.html or FILE.md).")],
    baseline_id: Annotated[
        int | None,
        typer.Option(
            "--baseline",
            help="The run to compare against (default: the pinned or previous done run of the same preset on "
            "the same machine).",
        ),
    ] = None,
    report_format: Annotated[
        str | None, typer.Option("--format", help="html or md (default: from the file's suffix, else html).")
    ] = None,
    all_metrics: Annotated[
        bool, typer.Option("--all-metrics", help="Every metric, not only the headline ones.")
    ] = False,
    db: DbOption = None,
) -> None:
    """A run against its baseline: the verdict table (and, in HTML, the key charts) in one file."""
    from dashboard import report, review
    from store import frames

    chosen_format = report_format or ("md" if out.suffix.lower() == ".md" else "html")
    if chosen_format not in report.REPORT_FORMATS:
        raise InputError(f"--format: {chosen_format!r} is not a report format (allowed: html, md)")
    if not out.parent.exists():
        raise InputError(f"--out: directory {str(out.parent)!r} does not exist")
    store = open_store(db, "report run")
    check_run(store, run_id)
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
    built = report.build_report(store, run_id, baseline_id, headline_only=not all_metrics)
    temporary = out.with_name(out.name + ".partial")
    temporary.write_text(report.render(built, chosen_format), encoding="utf-8")
    temporary.replace(out)
    typer.echo(f"wrote {out}: run {run_id} against baseline {baseline_id}: {review.summary_line(built.table)}")
