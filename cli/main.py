"""The ``decodelab`` command line: its commands and the entry point that runs them (what an
error that ends a command means, its exit code and line: cli/exits.py)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
import typer.core
import typer.main

from cli import ab as cli_ab
from cli import bench as cli_bench
from cli import fleet as cli_fleet
from cli import review_commands as cli_review_commands
from cli import roofline as cli_roofline
from cli.exits import EXIT_CLAIM_LOST, EXIT_INTERRUPTED, exit_for, terminal_line
from cli.options import DbOption, open_store
from runner.errors import InputError
from runner.fields import check_machine
from store.errors import ClaimLost
from store.files import check_output_file
from store.user_text import for_terminal

if TYPE_CHECKING:  # the store's module pulls in what a command that needs no store never loads
    from runner.spec.sweeps import SweepSpec
    from store.store import Store


def _flag_type_hidden(option: typer.core.TyperOption, ctx: Any) -> str | None:
    """A flag (--once, --read-only, --help) takes no value: typer 0.29's help would show it a
    ``<bool>`` type as if it did; other options keep their type."""
    return None if option.is_flag else _option_type(option, ctx=ctx)


_option_type = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = _flag_type_hidden  # type: ignore[method-assign,assignment]

# Help text as Markdown paragraphs, reflowed to the terminal: a docstring's line breaks inside a
# paragraph are its source's wrapping (typer's rich mode kept them, breaking lines mid-sentence).
HELP_MARKUP: Literal["markdown"] = "markdown"

app = typer.Typer(
    help="Measure what KV caches, weight quantization and speculative decoding really buy.",
    no_args_is_help=True,
    rich_markup_mode=HELP_MARKUP,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def show_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        typer.echo(f"decodelab {version('decodelab')}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool,
        typer.Option("--version", help="Show decodelab's version and exit.", callback=show_version, is_eager=True),
    ] = False,
) -> None:
    """Measure what KV caches, weight quantization and speculative decoding really buy."""


db_app = typer.Typer(help="Manage the store's schema.", no_args_is_help=True, rich_markup_mode=HELP_MARKUP)
report_app = typer.Typer(
    help="Write reports computed by decodelab's modules.", no_args_is_help=True, rich_markup_mode=HELP_MARKUP
)
app.add_typer(db_app, name="db")
app.add_typer(report_app, name="report")
machine_app = typer.Typer(help="Measure this machine.", no_args_is_help=True, rich_markup_mode=HELP_MARKUP)
app.add_typer(machine_app, name="machine")

PresetOption = Annotated[str | None, typer.Option("--preset", help="quick, seed or full.")]
SpecOption = Annotated[Path | None, typer.Option("--spec", help="A sweep spec TOML file.")]


def load_spec(preset: str | None, spec: Path | None) -> SweepSpec:
    from runner.spec.sweeps import load_preset, load_spec_file

    if (preset is None) == (spec is None):
        raise InputError("give exactly one of --preset NAME or --spec FILE")
    if preset is not None:
        return load_preset(preset)
    assert spec is not None  # exactly one of them, checked above
    return load_spec_file(spec)


@app.command()
def train(
    db: DbOption = None,
    preset: PresetOption = None,
    spec: SpecOption = None,
    corpus: Annotated[str | None, typer.Option(help="A UTF-8 text file to train on instead.")] = None,
) -> None:
    """Train the model a spec names (quick when none is given), or reuse the identical one already in the store."""
    from runner.execution.execute import log_to_stderr
    from runner.model.corpus import load_corpus
    from runner.model.train import train_or_reuse
    from runner.spec.sweeps import validate

    # Both given is refused, as `run` refuses it: --spec used to win silently over --preset.
    chosen = load_spec("quick" if preset is None and spec is None else preset, spec)
    if chosen.is_hf:
        raise InputError("--spec: an hf model is not trained here (allowed: a spec of decodelab's own model)")
    if corpus is not None:
        chosen = validate({**chosen.raw, "model": {**chosen.raw["model"], "corpus": corpus}})
    text = load_corpus(chosen.corpus, min_length=2 * chosen.raw["model"]["context_length"])
    store = open_store(db, "train")
    trained = train_or_reuse(
        store.results, chosen.model_config(len(text.vocabulary)), chosen.train_config(), text, log=log_to_stderr
    )
    typer.echo(
        f"model {trained.record.weights_hash}  parameters={trained.record.parameter_count:,}  "
        f"weight_bytes={trained.record.weight_bytes:,}  train_loss={trained.record.train_loss:.4f}  "
        f"val_loss={trained.record.val_loss:.4f}  unigram_entropy={text.unigram_entropy_nats():.4f}  "
        f"{'reused' if trained.reused else 'trained'}"
    )


@app.command()
def run(
    db: DbOption = None,
    preset: PresetOption = None,
    spec: SpecOption = None,
    device: Annotated[
        str | None, typer.Option(help="cpu or cuda: overrides the spec (on cuda, CPU-only impls are left out).")
    ] = None,
    only_unmeasured: Annotated[
        int | None,
        typer.Option(
            "--only-unmeasured",
            metavar="RUN",
            help="Measure again only the cases run RUN could not measure (a busy machine), into RUN itself.",
        ),
    ] = None,
) -> None:
    """Run a sweep in this process and record it (training the model first if needed).

    It takes this machine's slot as a job of its own: it waits while a worker here is timing a
    job, and no worker here starts one until it is done. A case the machine cannot measure (too
    busy to time it) is kept as not measured and the run goes on; `--only-unmeasured RUN` retries those."""
    from runner.execution.execute import check_device
    from runner.execution.worker import run_here
    from runner.spec.sweeps import for_device, validate

    if only_unmeasured is not None:
        if preset is not None or spec is not None or device is not None:
            raise InputError("--only-unmeasured: the run's own spec is used (allowed: no --preset, --spec or --device)")
        store = open_store(db, "run")
        chosen, preset = retry_spec(store, only_unmeasured)
    else:
        chosen = load_spec(preset, spec)
        if device is not None:
            if device not in ("cpu", "cuda"):
                raise InputError(f"--device: {device!r} is not a device (allowed: cpu, cuda)")
            chosen = validate(for_device(chosen.raw, device))
        check_device(chosen.device)  # before the store is opened: a refused run writes nothing
        store = open_store(db, "run")
    outcome = run_here(store, chosen, preset=preset, retry_run=only_unmeasured)
    # A done run is one more look at how far this machine drifts between runs: the figure is kept
    # with the machine, where the Review page and the reports show it.
    from analysis.review_inputs import record_machine_drift

    record_machine_drift(store, outcome.run_id)
    unmeasured = f", {outcome.cases_unmeasured} not measured" if outcome.cases_unmeasured else ""
    typer.echo(
        f"stored run {outcome.run_id} ({outcome.cases_recorded} cases{unmeasured}, {outcome.wall_seconds:.1f} s) in "
        f"{store.masked_url}; see it with `decodelab dashboard --db {store.masked_url}`"
    )


def retry_spec(store: Store, run_id: int) -> tuple[Any, str | None]:
    """The spec and preset of a run whose unmeasured cases `run --only-unmeasured` retries, after
    checking it is an ended run of this machine that has some."""
    from runner.execution.execute import check_device, torch_threads
    from runner.measure.machine import fingerprint
    from runner.spec.sweeps import validate

    found = store.results.run_to_retry(run_id)
    if found is None:
        raise InputError(f"--only-unmeasured: no run {run_id} in this store")
    raw_spec, preset, machine_id, status = found
    if status in ("queued", "running"):
        raise InputError(f"--only-unmeasured: run {run_id} is {status} (allowed: a run that has ended)")
    if not store.results.unmeasured_cases(run_id):
        raise InputError(f"--only-unmeasured: run {run_id} has no unmeasured cases")
    chosen = validate(raw_spec)
    check_device(chosen.device)
    with torch_threads(chosen.raw.get("threads", 0), fast_path=True):  # the machine as its runs record it
        here = store.results.machine_id(fingerprint(chosen.device))
    if here != machine_id:
        raise InputError(
            f"--only-unmeasured: run {run_id} was measured on another machine (allowed: a run of this machine; "
            "a run's cases all come from one machine)"
        )
    return chosen, preset


@app.command()
def enqueue(
    db: DbOption = None,
    preset: PresetOption = None,
    spec: SpecOption = None,
    machine: Annotated[str | None, typer.Option(help="Only a worker on this machine name may run it.")] = None,
) -> None:
    """Queue a sweep for any worker (or one machine's workers)."""
    chosen = load_spec(preset, spec)
    if machine is not None:
        machine = check_machine(machine, "--machine")
        if machine is None:
            raise InputError("--machine: an empty name is no machine (allowed: a printable name; omit it for any)")
    store = open_store(db, "enqueue")
    job_id = store.jobs.enqueue(chosen.raw, preset=preset, machine_name=machine, cases_total=chosen.cases_total())
    typer.echo(f"job {job_id} queued ({chosen.cases_total()} cases){f' for machine {machine}' if machine else ''}")


@app.command()
def cancel(
    job_id: Annotated[int, typer.Argument(metavar="JOB", help="The job to call off (see the dashboard's jobs).")],
    db: DbOption = None,
) -> None:
    """Call off a queued or running job: no worker claims it again.

    A running one stops at its next heartbeat, its run marked interrupted."""
    store = open_store(db, "cancel", creates=False)
    was = store.jobs.cancel(job_id)
    typer.echo(f"job {job_id} cancelled (it was {was})")


@app.command()
def export(
    out: Annotated[Path, typer.Option("--out", help="File to write.")],
    db: DbOption = None,
    run_id: Annotated[int | None, typer.Option("--run", help="Only this run.")] = None,
    export_format: Annotated[
        str | None, typer.Option("--format", help="csv, json or parquet (default: from the file's name, else csv).")
    ] = None,
) -> None:
    """Write measurements in the long format: run_id, machine, experiment, params, metric, value, unit.

    JSON rows also carry each measurement's raw samples and its run, so `decodelab import` can
    recreate the run in another store; a JSON file named *.gz is written gzip-compressed."""
    from store.export import EXPORT_FORMATS, compressed_name, format_of_name, write_export

    named = format_of_name(out)
    if export_format is not None and named is not None and export_format != named:
        # c.json written as CSV used to be reported as written, then refused by `import`.
        raise InputError(
            f"--out: {str(out)!r} names {named}, but --format is {export_format} (allowed: a name ending "
            f".{export_format}, or another --format)"
        )
    export_format = export_format or named or "csv"
    if export_format not in EXPORT_FORMATS:
        raise InputError(f"--format: {export_format!r} is not supported (allowed: {', '.join(EXPORT_FORMATS)})")
    if compressed_name(out) and export_format != "json":
        raise InputError(f"--out: {str(out)!r}: a .gz name is written gzip-compressed for --format json only")
    check_output_file(out)  # before the store is opened: a refused export does no work
    store = open_store(db, "export", read_only=True)
    if run_id is not None and not store.results.run_exists(run_id):
        raise InputError(f"--run: no run {run_id} in {store.masked_url}")
    if export_format == "json":
        from store.transfer import write_json_export

        rows = write_json_export(store, out, run_id)
    else:
        from store import frames  # pandas: loaded only once the input and the store are known good

        rows = write_export(frames.export_rows(store, run_id), out, export_format)
    typer.echo(f"wrote {rows} measurements to {out}")


@app.command("import")
def import_runs(
    file: Annotated[
        Path, typer.Argument(help="A JSON file written by `decodelab export --format json`, plain or gzip-compressed.")
    ],
    db: DbOption = None,
) -> None:
    """Import exported runs into this store (importing twice adds nothing)."""
    from store.transfer import import_rows, read_export

    if not file.is_file():
        raise InputError(f"FILE: {str(file)!r} is not a file")
    rows = read_export(file)
    store = open_store(db, "import")
    for uid, run_id, added in import_rows(store, rows):
        typer.echo(f"run {for_terminal(uid)} → run {run_id} in {store.masked_url}: {added} cases added")


app.command()(cli_bench.bench)


@report_app.command("context-cost")
def report_context_cost(
    out: Annotated[Path, typer.Option("--out", help="Directory for cost_report.json and .md.")] = Path("."),
) -> None:
    """The context-cost lab's report, every number computed by the counting module."""
    from cli.lab_reports import write_context_cost_report

    if not out.is_dir():
        raise InputError(f"--out: {str(out)!r} is not a directory")
    for path in write_context_cost_report(out):
        typer.echo(f"wrote {path}")


@report_app.command("seeds")
def report_writeups(
    run_id: Annotated[
        int, typer.Option("--run", help="The run to set beside the write-ups (a seed run fills every row).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Directory for seed_report.json and .md.")] = Path("."),
    db: DbOption = None,
) -> None:
    """Every figure of the five write-ups beside this run's, with its method and a verdict."""
    from analysis.writeups import summary, write_writeup_report, writeup_rows

    if not out.is_dir():
        raise InputError(f"--out: {str(out)!r} is not a directory")
    store = open_store(db, "report seeds", read_only=True)
    if not store.results.run_exists(run_id):
        raise InputError(f"--run: no run {run_id} in {store.masked_url}")
    rows = writeup_rows(store.results, run_id)
    for path in write_writeup_report(rows, run_id, out):
        typer.echo(f"wrote {path}")
    typer.echo(summary(rows))


@app.command()
def recommend(
    run_id: Annotated[int, typer.Option("--run", help="A run with the speculative experiment.")],
    db: DbOption = None,
) -> None:
    """The speculative setup the a-priori prediction picks per impl, predicted and measured, and why."""
    from cli.recommend import recommendations

    store = open_store(db, "recommend", read_only=True)
    if not store.results.run_exists(run_id):
        raise InputError(f"--run: no run {run_id} in {store.masked_url}")
    lines = recommendations(store.results.measurements(run_id, "speculative"))
    if not lines:
        raise InputError(f"--run: run {run_id} recorded no speculative choice (its spec has no speculative section)")
    for line in lines:
        typer.echo(line)


@report_app.command("scale")
def report_scale(
    prompt_tokens: Annotated[int, typer.Option(min=0, max=10_000_000, help="Tokens of the prompt.")] = 400,
    new_tokens: Annotated[int, typer.Option(min=1, max=10_000_000, help="Tokens generated after it.")] = 100,
    tokens_per_user: Annotated[
        int, typer.Option(min=1, max=10_000_000, help="Tokens each user's KV cache holds.")
    ] = 8000,
    budget_gib: Annotated[
        float, typer.Option(min=0.001, max=1e9, help="Memory for KV caches, GiB (2^30 bytes).")
    ] = 80.0,
) -> None:
    """Attention work and KV-cache bytes for named real model shapes, and the users a budget holds.

    Attention work is counted in score pairs (query-key products), with and without a KV cache."""
    from cli.lab_reports import scale_table

    typer.echo(scale_table(prompt_tokens, new_tokens, tokens_per_user, budget_gib))


app.command()(cli_ab.ab)
app.command()(cli_fleet.worker)
app.command()(cli_fleet.workers)
app.command()(cli_fleet.dashboard)
app.command()(cli_review_commands.runs)
app.command()(cli_review_commands.tag)
app.command()(cli_review_commands.note)
report_app.command("run")(cli_review_commands.report_run)
report_app.command("machines")(cli_review_commands.report_machines)
report_app.command("roofline")(cli_roofline.report_roofline)
machine_app.command("profile")(cli_roofline.machine_profile)
db_app.command("upgrade")(cli_fleet.db_upgrade)
db_app.command("current")(cli_fleet.db_current)


@functools.cache
def click_command() -> Callable[..., Any]:
    """The command line typer builds from ``app``, built once a process: calling ``app`` itself
    rebuilds it every time (every command's signature read again, 20-70 ms), which a caller of
    main() in process (the fuzz test: 400 command lines) paid on each call."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> None:
    """The entry point: every error a person can cause ends in one line on stderr."""
    try:
        # Not app(...): that also installs typer's pretty-traceback hook, which
        # pretty_exceptions_enable=False leaves printing the standard traceback anyway.
        result = click_command()(args=argv, prog_name="decodelab", standalone_mode=False)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except ClaimLost as error:
        typer.echo(
            f"error: {terminal_line(str(error))}: another worker owns it now; nothing more was written", err=True
        )
        sys.exit(EXIT_CLAIM_LOST)
    except (KeyboardInterrupt, typer.Abort):
        typer.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as error:
        code, message = exit_for(error)
        typer.echo(message, err=True)
        sys.exit(code)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
