"""The fleet's commands: ``worker``, ``workers``, ``db upgrade``, ``db current`` and
``dashboard`` (registered on the app in cli/main.py)."""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from cli.access import load_auth, secrets_paths
from cli.options import DbOption, open_store
from runner.errors import InputError
from runner.model.data_folder import DEFAULT_DATA_DIR


def worker(
    db: DbOption = None,
    once: Annotated[bool, typer.Option("--once", help="Run at most one job, then exit.")] = False,
    until_empty: Annotated[
        bool,
        typer.Option(
            "--until-empty", help="Exit 0 once no queued job is left for this machine (a batch job, an array task)."
        ),
    ] = False,
    poll_seconds: Annotated[float, typer.Option(min=0.1, max=3600)] = 2.0,
    stale_after_seconds: Annotated[
        float, typer.Option(min=1, max=86400, help="Requeue a running job silent for this long.")
    ] = 60.0,
    max_idle_seconds: Annotated[
        float | None, typer.Option(min=1, max=30 * 86400, help="Exit after this long without a job.")
    ] = None,
    heartbeat_seconds: Annotated[float, typer.Option(min=0.2, max=3600, help="How often a running job beats.")] = 5.0,
    store_outage_limit_seconds: Annotated[
        float,
        typer.Option(min=1, max=86400, help="PostgreSQL: retry through an outage this long, then exit (code 75)."),
    ] = 300.0,
) -> None:
    """Claim queued jobs from the store and run them, one at a time per machine.

    It heartbeats and reports progress; SIGTERM and Ctrl-C requeue the running job for the next
    worker."""
    if stale_after_seconds < 3 * heartbeat_seconds:
        typer.echo("warning: --stale-after-seconds below three heartbeats may requeue live jobs", err=True)
    store = open_store(db, "worker")
    # torch comes with the worker's code: loaded once the store is open, so a refused worker
    # (a missing store, a shared store behind the code) answers without paying for it.
    from analysis.review_inputs import record_machine_drift
    from runner.execution.worker import work

    work(
        store,
        once=once,
        until_empty=until_empty,
        poll_seconds=poll_seconds,
        stale_after_seconds=stale_after_seconds,
        max_idle_seconds=max_idle_seconds,
        heartbeat_seconds=heartbeat_seconds,
        outage_limit_seconds=store_outage_limit_seconds,
        # Progress bars only on a terminal: in a log (journald, kubectl logs, the dashboard's
        # worker log) they are noise, and a line logged after one would not start a line.
        show_progress=sys.stderr.isatty(),
        after_run=record_machine_drift,
    )


def workers(
    db: DbOption = None,
    hours: Annotated[float, typer.Option(min=0.01, max=24 * 365, help="Show workers seen this recently.")] = 24.0,
) -> None:
    """List live and recently dead workers: machine, state, the job each runs and its progress."""
    opened = open_store(db, "workers", read_only=True)
    # pandas comes with frames: loaded once the store is open, so a refused command never pays it.
    from store import frames
    from store.user_text import for_terminal

    listed = frames.workers(opened, seen_within_hours=hours)
    if listed.empty:
        typer.echo(f"no worker seen in the last {hours:g} hours")
        return
    header = f"{'id':>5}  {'machine':<20} {'kind':<6} {'state':<7} {'name':<28} {'job':>6}  {'progress':<10} last seen"
    typer.echo(header)
    for row in listed.to_dict("records"):
        job = "" if row["job_id"] is None or row["job_id"] != row["job_id"] else str(int(row["job_id"]))
        progress = (
            f"{int(row['cases_done'])}/{int(row['cases_total'])}"
            if job and row["cases_total"] == row["cases_total"]
            else ""
        )
        typer.echo(
            f"{int(row['worker_id']):>5}  {for_terminal(row['machine'])[:20]:<20} {row['kind']:<6} {row['state']:<7} "
            f"{for_terminal(row['name'])[:28]:<28} {job:>6}  {progress:<10} {str(row['last_seen_at'])[:19]}"
        )


def db_upgrade(db: DbOption = None) -> None:
    """Upgrade the store's schema to this version of decodelab.

    The only command that migrates a PostgreSQL store."""
    from store.engine import current_revision, head_revision

    store = open_store(db, "db upgrade", upgrade=True)
    typer.echo(
        f"store {store.masked_url} is at schema revision {current_revision(store.engine)} (head {head_revision()})"
    )


def db_current(db: DbOption = None) -> None:
    """Show the store's schema revision and this decodelab's, changing nothing."""
    from sqlalchemy.exc import DatabaseError, OperationalError

    from store.engine import (
        create_store_engine,
        current_revision,
        describe_connection_error,
        head_revision,
        mask_url,
        resolve_url,
        sqlite_path,
    )
    from store.errors import StoreError

    url = resolve_url(db)
    sqlite_file = sqlite_path(url)
    if sqlite_file is not None and not sqlite_file.exists():
        # Looking must not create: SQLite would make an empty file at a mistyped path.
        raise StoreError(f"store {mask_url(url)}: no such file {str(sqlite_file)!r}")
    engine = create_store_engine(url, read_only=True)
    try:
        revision = current_revision(engine)
    except (OperationalError, DatabaseError) as error:
        raise StoreError(describe_connection_error(url, error)) from None
    finally:
        engine.dispose()
    head = head_revision()
    if revision == head:
        verdict = "up to date"
    elif revision is None:
        verdict = f"empty: run `decodelab db upgrade --db {mask_url(url)}`"
    elif revision < head:
        verdict = f"older than this decodelab: run `decodelab db upgrade --db {mask_url(url)}`"
    else:
        verdict = "newer than this decodelab: upgrade decodelab"
    typer.echo(f"store {mask_url(url)}: schema revision {revision or 'none'}; this decodelab: {head} ({verdict})")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def port_in_use(host: str, port: int) -> bool:
    """Whether something already listens on ``host:port``: binding as the server will (address
    reuse on, so a port in TIME_WAIT after a stopped dashboard reads as free)."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            # Only a listener makes the port busy; an address this machine lacks is the server's to report.
            return error.errno == errno.EADDRINUSE
    return False


def dashboard(
    db: DbOption = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to serve on.")] = 8501,
    host: Annotated[
        str,
        typer.Option(
            help="Address to bind; anything but loopback needs --read-only, or --allow-remote-launch with a login "
            "(or --behind-proxy)."
        ),
    ] = "127.0.0.1",
    read_only: Annotated[
        bool, typer.Option("--read-only", help="No launch form, no worker, no schema upgrade: it only reads.")
    ] = False,
    allow_remote_launch: Annotated[
        bool,
        typer.Option(
            "--allow-remote-launch", help="Serve the launch form on a non-loopback --host (put a login before it)."
        ),
    ] = False,
    behind_proxy: Annotated[
        bool,
        typer.Option(
            "--behind-proxy",
            help="An authenticating proxy fronts this dashboard: serve the launch form remotely without a login here.",
        ),
    ] = False,
    data_dir: Annotated[
        Path,
        typer.Option(
            "--data-dir", help="The only folder whose files a launch from the dashboard may train on (else default)."
        ),
    ] = DEFAULT_DATA_DIR,
    max_hours: Annotated[
        float,
        typer.Option(
            "--max-hours",
            min=0.01,
            max=8760,
            help="The longest sweep a launch from the dashboard may queue, by estimate.",
        ),
    ] = 8.0,
    max_memory: Annotated[
        float,
        typer.Option(
            "--max-memory", min=0.01, max=1e6, help="The most memory (GiB) a dashboard launch may need, by estimate."
        ),
    ] = 4.0,
    max_queued: Annotated[
        int,
        typer.Option(
            "--max-queued", min=1, max=100_000, help="No launch from the dashboard while this many jobs wait or run."
        ),
    ] = 20,
) -> None:
    """Serve the Streamlit dashboard for a store (on 127.0.0.1 unless --host says otherwise)."""
    if not is_loopback(host) and not read_only and not allow_remote_launch:
        raise InputError(
            f"--host: {host} is reachable from the network and the launch form enqueues jobs "
            "(allowed: a loopback address, or add --read-only, or --allow-remote-launch on purpose)"
        )
    # Fails closed: a broken secrets file would otherwise serve everything to anyone. Streamlit is
    # handed the same list of secrets files, so it reads no [auth] that was not checked here.
    secrets_files = secrets_paths()
    auth = load_auth(secrets_files)
    if not is_loopback(host) and allow_remote_launch and not auth.login_configured and not behind_proxy:
        raise InputError(
            f"--allow-remote-launch: {host} is reachable from the network and no login is configured "
            "(allowed: an [auth] section in .streamlit/secrets.toml, or --behind-proxy when an authenticating "
            "proxy fronts the dashboard)"
        )
    # Checked before anything is printed: "dashboard at …" must not be said of another's port.
    if port_in_use(host, port):
        raise InputError(f"--port: {port} is in use on {host} (allowed: a free port, e.g. --port {port + 1})")
    # Read-only never upgrades: a read-only dashboard writes nothing, the schema included.
    store = open_store(db, "dashboard", read_only=read_only)
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
        # A team's dashboard, not a script being written: no "Deploy" button, no developer menu.
        "--client.toolbarMode",
        "viewer",
        *[argument for path in secrets_files for argument in ("--secrets.files", str(path.resolve()))],
    ]
    mode = " (read-only)" if read_only else ""
    typer.echo(
        f"dashboard for {store.masked_url}{mode}: open http://{host}:{port} "
        "(Ctrl-C stops it and any worker it started)",
        err=True,
    )
    store.close()
    # The URL travels in the environment, never on a command line another user could read. Exec
    # rather than a child process: a signal sent to this command then stops the server itself.
    sys.stdout.flush()
    sys.stderr.flush()
    environment = {**os.environ, "DECODELAB_DB": store.url}
    environment.pop("DECODELAB_READ_ONLY", None)
    environment["DECODELAB_DATA_DIR"] = str(data_dir.resolve())
    # The caps on what a visitor may launch: this command's, never a spec's (dashboard/launch.py).
    environment["DECODELAB_MAX_HOURS"] = repr(max_hours)
    environment["DECODELAB_MAX_MEMORY_GIB"] = repr(max_memory)
    environment["DECODELAB_MAX_QUEUED"] = str(max_queued)
    if read_only:
        environment["DECODELAB_READ_ONLY"] = "1"
    os.execve(sys.executable, command, environment)
