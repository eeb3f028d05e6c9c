"""`decodelab ab`: two revisions of decodelab measured interleaved on this machine, stored as
one A/B pair of runs and reviewed against each other (runner/ab)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.options import DbOption, open_store
from cli.review_commands import checked_format, checked_gate, write_file
from runner.errors import InputError

# At least 2: one round is no interleaving. 50 rounds of the quick preset take hours.
MAX_ROUNDS = 50


def ab(
    baseline: Annotated[str, typer.Option("--baseline", help="The revision to compare against, e.g. origin/main.")],
    candidate: Annotated[str, typer.Option("--candidate", help="The revision under review, e.g. HEAD.")],
    preset: Annotated[str | None, typer.Option("--preset", help="quick, seed or full.")] = None,
    spec: Annotated[Path | None, typer.Option("--spec", help="A sweep spec TOML file.")] = None,
    only: Annotated[str | None, typer.Option("--only", help="Only this experiment of the spec.")] = None,
    rounds: Annotated[
        int,
        typer.Option(
            "--rounds",
            min=2,
            max=MAX_ROUNDS,
            help="Times each timed case runs on each side, each round in fresh worker processes; the review's "
            "units (docs/ci.md measured its error rates at 10: give 10 to a job that gates on it).",
        ),
    ] = 3,
    repo: Annotated[Path, typer.Option("--repo", help="The decodelab checkout holding both revisions.")] = Path("."),
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write the review (FILE.md or FILE.html, or - for Markdown on stdout)."),
    ] = None,
    fail_on: Annotated[
        str | None,
        typer.Option("--fail-on", help="Exit 1 when any row has one of these verdicts, e.g. regressed (a CI gate)."),
    ] = None,
    db: DbOption = None,
) -> None:
    """Measure two revisions interleaved on this machine and review the candidate against the baseline.

    Each revision runs in its own worktree and worker process. Stored as two runs tagged
    `rev:<commit>` and linked as one A/B pair. With --fail-on, exits 1 when a listed verdict
    stands (0 otherwise, 2 for bad input), as `report run --fail-on`."""
    from runner.ab.run import checked_revisions, run_ab
    from runner.execution.execute import check_device, log_to_stderr
    from runner.spec.sweeps import load_preset, load_spec_file, validate

    if (preset is None) == (spec is None):
        raise InputError("give exactly one of --preset NAME or --spec FILE")
    chosen = load_preset(preset) if preset is not None else load_spec_file(spec)  # type: ignore[arg-type]
    if only is not None:
        experiments = chosen.raw.get("experiments", {})
        if only not in experiments:
            raise InputError(f"--only: {only!r} is not an experiment of this spec (allowed: {', '.join(experiments)})")
        chosen = validate({**chosen.raw, "experiments": {only: experiments[only]}})
        preset = None  # a part of a preset is a custom sweep (analysis.runs.sweep_label names it)
    check_device(chosen.device)
    chosen_format = checked_format(out, "md" if str(out) == "-" else None) if out is not None else None
    gate = checked_gate(fail_on)
    root, base, cand = checked_revisions(repo, baseline, candidate)
    store = open_store(db, "ab")
    outcome = run_ab(store, root, base, cand, chosen, preset, rounds, log_to_stderr)
    # The review's code (pandas, the statistics) is loaded once the session is stored.
    from analysis import report, report_render, review_lines

    built = report.build_report(store, outcome.candidate_run, outcome.baseline_run)
    summary = review_lines.summary_line(built.table)
    typer.echo(
        f"A/B: baseline {base.short} (run {outcome.baseline_run}) against candidate {cand.short} "
        f"(run {outcome.candidate_run}): {outcome.cases} cases, {outcome.cases_interleaved} timed ones "
        f"interleaved over {rounds} rounds, {outcome.wall_seconds:.0f} s",
        err=out is not None and str(out) == "-",
    )
    if out is not None and chosen_format is not None:
        if str(out) == "-":
            typer.echo(report_render.render(built, chosen_format), nl=False)
        else:
            write_file(out, report_render.render(built, chosen_format))
            typer.echo(f"wrote {out}")
    verdicts = built.table["verdict"] if not built.table.empty else None
    equal = int((verdicts == "unchanged").sum()) if verdicts is not None else 0
    differ = int((verdicts == "changed").sum()) if verdicts is not None else 0
    typer.echo(
        f"deterministic figures, computed once per revision: {equal} equal, {differ} differ; review: {summary}",
        err=out is not None and str(out) == "-",
    )
    standing = sorted(set(gate) & set(built.table["verdict"]) if not built.table.empty else set())
    if standing:
        counts = review_lines.verdict_counts(built.table)
        typer.echo(f"--fail-on: {', '.join(f'{counts[name]} {name}' for name in standing)}", err=True)
        raise typer.Exit(1)
