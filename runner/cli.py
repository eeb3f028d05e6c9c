"""The ``decodelab`` command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import click
import typer

from runner.errors import InputError
from store import frames
from store.errors import StoreError

app = typer.Typer(
    help="Measure what KV caches, weight quantization and speculative decoding really buy.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
db_app = typer.Typer(help="Manage the store's schema.", no_args_is_help=True)
report_app = typer.Typer(help="Write reports computed by decodelab's modules.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(report_app, name="report")

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Store URL (else $DECODELAB_DB, else sqlite:///decodelab.db).", show_default=False),
]
PresetOption = Annotated[str | None, typer.Option("--preset", help="quick, seed or full.")]
SpecOption = Annotated[Path | None, typer.Option("--spec", help="A sweep spec TOML file.")]


def open_store(db: str | None):  # noqa: ANN201 - imported lazily to keep --help fast
    from store.store import Store

    return Store(db)


def load_spec(preset: str | None, spec: Path | None):  # noqa: ANN201
    from runner.sweeps import load_preset, load_spec_file

    if (preset is None) == (spec is None):
        raise InputError("give exactly one of --preset NAME or --spec FILE")
    return load_preset(preset) if preset is not None else load_spec_file(spec)  # type: ignore[arg-type]


@app.command()
def train(
    db: DbOption = None,
    preset: PresetOption = "quick",
    spec: SpecOption = None,
    corpus: Annotated[str | None, typer.Option(help="A UTF-8 text file to train on instead.")] = None,
) -> None:
    """Train the model a spec names, or reuse the identical one already in the store."""
    from runner.corpus import load_corpus
    from runner.execute import log_to_stderr
    from runner.sweeps import validate
    from runner.train import train_or_reuse

    chosen = load_spec(None if spec is not None else preset, spec)
    if corpus is not None:
        chosen = validate({**chosen.raw, "model": {**chosen.raw["model"], "corpus": corpus}})
    text = load_corpus(chosen.corpus, min_length=2 * chosen.raw["model"]["context_length"])
    store = open_store(db)
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
) -> None:
    """Run a sweep in this process and record it (training the model first if needed)."""
    from runner.execute import check_device, execute
    from runner.sweeps import for_device, validate

    chosen = load_spec(preset, spec)
    if device is not None:
        if device not in ("cpu", "cuda"):
            raise InputError(f"--device: {device!r} is not a device (allowed: cpu, cuda)")
        chosen = validate(for_device(chosen.raw, device))
    check_device(chosen.device)  # before the store is opened: a refused run writes nothing
    outcome = execute(open_store(db), chosen, preset=preset)
    typer.echo(f"run {outcome.run_id}: {outcome.cases_recorded} cases in {outcome.wall_seconds:.1f} s")


@app.command()
def enqueue(
    db: DbOption = None,
    preset: PresetOption = None,
    spec: SpecOption = None,
    machine: Annotated[str | None, typer.Option(help="Only a worker on this machine name may run it.")] = None,
) -> None:
    """Queue a sweep for any worker (or one machine's workers)."""
    chosen = load_spec(preset, spec)
    store = open_store(db)
    job_id = store.jobs.enqueue(chosen.raw, preset=preset, machine_name=machine, cases_total=chosen.cases_total())
    typer.echo(f"job {job_id} queued ({chosen.cases_total()} cases){f' for machine {machine}' if machine else ''}")


@app.command()
def worker(
    db: DbOption = None,
    once: Annotated[bool, typer.Option("--once", help="Run at most one job, then exit.")] = False,
    poll_seconds: Annotated[float, typer.Option(min=0.1, max=3600)] = 2.0,
    stale_after_seconds: Annotated[
        float, typer.Option(min=5, max=86400, help="Requeue a running job silent for this long.")
    ] = 60.0,
    max_idle_seconds: Annotated[float | None, typer.Option(min=1, help="Exit after this long without a job.")] = None,
    heartbeat_seconds: Annotated[float, typer.Option(min=0.2, max=3600, help="How often a running job beats.")] = 5.0,
) -> None:
    """Claim queued jobs from the store and run them, heartbeating and reporting progress."""
    from runner.worker import work

    if stale_after_seconds < 3 * heartbeat_seconds:
        typer.echo("warning: --stale-after-seconds below three heartbeats may requeue live jobs", err=True)
    work(
        open_store(db),
        once=once,
        poll_seconds=poll_seconds,
        stale_after_seconds=stale_after_seconds,
        max_idle_seconds=max_idle_seconds,
        heartbeat_seconds=heartbeat_seconds,
    )


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Upgrade the store's schema to this version of decodelab."""
    from store.engine import current_revision, head_revision

    store = open_store(db)
    typer.echo(
        f"store {store.masked_url} is at schema revision {current_revision(store.engine)} (head {head_revision()})"
    )


@app.command()
def export(
    out: Annotated[Path, typer.Option("--out", help="File to write.")],
    db: DbOption = None,
    run_id: Annotated[int | None, typer.Option("--run", help="Only this run.")] = None,
    export_format: Annotated[str, typer.Option("--format", help="csv, json or parquet.")] = "csv",
) -> None:
    """Write measurements in the long format: run_id, machine, experiment, params, metric, value, unit.

    JSON rows also carry each measurement's raw samples and its run, so `decodelab import` can
    recreate the run in another store."""
    from store.export import EXPORT_FORMATS, write_export

    if export_format not in EXPORT_FORMATS:
        raise InputError(f"--format: {export_format!r} is not supported (allowed: {', '.join(EXPORT_FORMATS)})")
    store = open_store(db)
    if run_id is not None and not store.results.run_exists(run_id):
        raise InputError(f"--run: no run {run_id} in {store.masked_url}")
    if not out.parent.exists():
        raise InputError(f"--out: directory {str(out.parent)!r} does not exist")
    if export_format == "json":
        from store.transfer import write_json_export

        rows = write_json_export(store, out, run_id)
    else:
        rows = write_export(frames.export_rows(store, run_id), out, export_format)
    typer.echo(f"wrote {rows} measurements to {out}")


@app.command("import")
def import_runs(
    file: Annotated[Path, typer.Argument(help="A JSON file written by `decodelab export --format json`.")],
    db: DbOption = None,
) -> None:
    """Import exported runs into this store (importing twice adds nothing)."""
    from store.transfer import import_rows, read_export

    if not file.is_file():
        raise InputError(f"FILE: {str(file)!r} is not a file")
    rows = read_export(file)
    store = open_store(db)
    for uid, run_id, added in import_rows(store, rows):
        typer.echo(f"run {uid} → run {run_id} in {store.masked_url}: {added} cases added")


@app.command()
def dashboard(
    db: DbOption = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to serve on.")] = 8501,
    host: Annotated[
        str, typer.Option(help="Address to bind; anything but 127.0.0.1 exposes the dashboard to the network.")
    ] = "127.0.0.1",
) -> None:
    """Serve the Streamlit dashboard for a store (on 127.0.0.1 unless --host says otherwise)."""
    import os
    import sys

    store = open_store(db)  # upgrades an older schema, refuses a bad URL, before anything starts
    app_path = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app_path),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]
    typer.echo(f"dashboard for {store.masked_url} at http://{host}:{port}", err=True)
    store.close()
    # The URL travels in the environment, never on a command line another user could read. Exec
    # rather than a child process: a signal sent to this command then stops the server itself.
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, command, {**os.environ, "DECODELAB_DB": store.url})


@app.command()
def bench(
    db: DbOption = None,
    only: Annotated[list[str] | None, typer.Option(help="Run just these benchmarks (repeatable).")] = None,
) -> None:
    """Run the side-by-side benchmarks and record them in the store as a run (experiment bench)."""
    import time

    from runner.bench import BENCHMARKS, run_benchmark
    from runner.execute import log_to_stderr
    from runner.machine import code_version, fingerprint

    known = {benchmark.name: benchmark for benchmark in BENCHMARKS}
    chosen = only or list(known)
    for name in chosen:
        if name not in known:
            raise InputError(f"--only: {name!r} is not a benchmark (allowed: {', '.join(known)})")
    store = open_store(db)
    run_id = store.results.start_run(
        machine_id=store.results.machine_id(fingerprint()),
        spec={"benchmarks": chosen},
        code_version=code_version(),
        model_id=None,
        preset="bench",
    )
    started = time.perf_counter()
    try:
        for name in chosen:
            store.results.record_case(run_id, run_benchmark(known[name], store.url, log_to_stderr))
    except KeyboardInterrupt:
        store.results.finish_run(run_id, "interrupted", error="interrupted", wall_seconds=time.perf_counter() - started)
        raise
    except Exception as error:
        store.results.finish_run(run_id, "failed", error=str(error), wall_seconds=time.perf_counter() - started)
        raise InputError(str(error)) from None
    store.results.finish_run(run_id, "done", wall_seconds=time.perf_counter() - started)
    typer.echo(f"bench run {run_id}: {len(chosen)} benchmarks in {time.perf_counter() - started:.0f} s")


@report_app.command("context-cost")
def report_context_cost(
    out: Annotated[Path, typer.Option("--out", help="Directory for cost_report.json and .md.")] = Path("."),
) -> None:
    """The context-cost lab's report, every number computed by the counting module."""
    from runner.reports import write_context_cost_report

    if not out.is_dir():
        raise InputError(f"--out: {str(out)!r} is not a directory")
    for path in write_context_cost_report(out):
        typer.echo(f"wrote {path}")


@report_app.command("seeds")
def report_seeds(
    run_id: Annotated[
        int, typer.Option("--run", help="The run to set beside the write-ups (a seed run fills every row).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Directory for seed_report.json and .md.")] = Path("."),
    db: DbOption = None,
) -> None:
    """Every figure of the five write-ups beside this run's, with its method and a verdict."""
    from runner.seed_report import seed_rows, summary, write_seed_report

    if not out.is_dir():
        raise InputError(f"--out: {str(out)!r} is not a directory")
    store = open_store(db)
    if not store.results.run_exists(run_id):
        raise InputError(f"--run: no run {run_id} in {store.masked_url}")
    rows = seed_rows(store.results, run_id)
    for path in write_seed_report(rows, run_id, out):
        typer.echo(f"wrote {path}")
    typer.echo(summary(rows))


@report_app.command("scale")
def report_scale(
    prompt_tokens: Annotated[int, typer.Option(min=0, max=10_000_000)] = 400,
    new_tokens: Annotated[int, typer.Option(min=0, max=10_000_000)] = 100,
    tokens_per_user: Annotated[int, typer.Option(min=1, max=10_000_000)] = 8000,
    budget_gib: Annotated[float, typer.Option(min=0.001, max=1e9)] = 80.0,
) -> None:
    """Attention work and KV-cache bytes for named real model shapes."""
    from runner.reports import scale_table

    typer.echo(scale_table(prompt_tokens, new_tokens, tokens_per_user, budget_gib))


def main() -> None:
    try:
        result = app(standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except (InputError, StoreError) as error:
        typer.echo(f"error: {error}", err=True)
        sys.exit(2)
    except (KeyboardInterrupt, click.exceptions.Abort):
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as error:
        # A damaged store (truncated, corrupted, read-only, full disk) surfaces as a database
        # error wherever it is first touched: one line, no SQL, no URL, non-zero exit.
        from sqlalchemy.exc import DBAPIError

        if not isinstance(error, DBAPIError):
            raise
        reason = str(error.orig).strip().splitlines()[0] if error.orig is not None else type(error).__name__
        typer.echo(f"error: the store failed: {reason}", err=True)
        sys.exit(2)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
