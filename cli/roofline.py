"""The roofline commands: `decodelab machine profile` measures this machine's roof and stores it;
`decodelab report roofline` writes a run's figures placed on it."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.options import DbOption, open_store
from cli.review_commands import FormatOption, OutOption, RunOption, check_run, checked_format, write_file
from runner.errors import InputError


def machine_profile(
    db: DbOption = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Smaller working sets and fewer repeats: seconds, for tests.")
    ] = False,
) -> None:
    """Measure this machine's roof and store it with the machine.

    The roof: peak multiply-adds per precision, and read bandwidth per cache level on one thread
    and on all."""
    from runner.cost import machine_profile as profiler
    from runner.measure.machine import fingerprint

    store = open_store(db, "machine profile")
    machine = fingerprint()
    figures = profiler.profile(quick=quick)
    machine_id = store.results.machine_id(machine)
    profile_id = store.profiles.save(machine_id, figures["instruction_set"], quick, figures)
    for line in profiler.name_value_lines(figures):
        typer.echo(line)
    typer.echo(profiler.table(figures))
    typer.echo(f"profile {profile_id} of machine {machine.name} stored in {store.masked_url}")


def report_roofline(run_id: RunOption, out: OutOption, report_format: FormatOption = None, db: DbOption = None) -> None:
    """A run's timed figures on its machine's roof: the table, the conclusions and (HTML) the chart."""
    from analysis import roofline_report

    chosen_format = checked_format(out, report_format)
    store = open_store(db, "report roofline", read_only=True)
    check_run(store, run_id)
    built = roofline_report.build(store, run_id)
    if built.roof is None:
        raise InputError(f"--run: run {run_id}'s machine has no profile (run `decodelab machine profile` there)")
    write_file(out, roofline_report.render(built, chosen_format))
    typer.echo(f"wrote {out}: run {run_id}, {len(built.points)} placed figures on {built.machine}'s roof")
