"""`decodelab ab` end to end: check both revisions, check them out, run the interleaved session
and store it as two runs linked as one A/B pair.

Nothing is stored until both sides have measured every case: a refusal or a side that fails
(its build, its model, a case) ends the session with one line and no run. The two runs are
then written, each tagged ``rev:<commit>``, and both tagged ``ab:<baseline run>-<candidate
run>``, the pair analysis.runs reads: the candidate's review defaults to its baseline, both stay
out of other runs' baselines and the machine's drift figure, and the review between them needs
no drift allowance (analysis.review_inputs)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from runner.ab.protocol import SideWorker, session_cpus
from runner.ab.revisions import (
    SIDES,
    Revision,
    Worktrees,
    check_clean,
    check_one_environment,
    check_schema,
    repository_root,
    resolve,
)
from runner.ab.session import Session
from store.store import Store

Log = Callable[[str], None]
AB_TAG_PREFIX = "ab:"


@dataclass(frozen=True)
class AbOutcome:
    baseline: Revision
    candidate: Revision
    baseline_run: int
    candidate_run: int
    cases: int
    cases_interleaved: int
    wall_seconds: float


def checked_revisions(repo: Path, baseline: str, candidate: str) -> tuple[Path, Revision, Revision]:
    """The checkout and both sides, every check that needs no store done (one line each)."""
    root = repository_root(repo)
    sides = (resolve(root, SIDES[0], baseline), resolve(root, SIDES[1], candidate))
    check_clean(root, sides)
    check_one_environment(root, *sides)
    return root, sides[0], sides[1]


def absolute_url(url: str) -> str:
    """The store URL as the workers must see it from their worktrees: a relative SQLite path made
    absolute against this process's working directory."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:" or os.path.isabs(database):
        return url
    return parsed.set(database=os.path.abspath(database)).render_as_string(hide_password=False)


def store_revision(store: Store) -> str | None:
    from store.engine import current_revision

    return current_revision(store.engine)


def run_ab(
    store: Store,
    root: Path,
    baseline: Revision,
    candidate: Revision,
    spec: Any,
    preset: str | None,
    rounds: int,
    log: Log,
) -> AbOutcome:
    """Run the session and store it (the revisions already checked by ``checked_revisions``)."""
    from runner.execution.execute import ensure_profile, torch_threads
    from runner.measure.machine import fingerprint

    check_schema(root, (baseline, candidate), store_revision(store))
    started = time.perf_counter()
    threads = int(spec.raw.get("threads", 0))
    cpus = session_cpus(threads)
    with Worktrees(root) as worktrees:
        workers: list[SideWorker] = []
        try:
            for revision in (baseline, candidate):
                workers.append(SideWorker(revision, worktrees.add(revision), cpus, worktrees.folder))
            session = Session(workers[0], workers[1], rounds, log)
            session.build()
            # The machine as the cases see it: the spec's threads, as execute.open_run records it.
            with torch_threads(threads, fast_path=True):
                machine_id = store.results.machine_id(fingerprint(spec.device))
                roof = ensure_profile(store, machine_id, log) if spec.device == "cpu" else None
            log(f"A/B: baseline {baseline.short} and candidate {candidate.short}, pinned to CPUs {sorted(cpus)}")
            session.prepare(
                {
                    "db": absolute_url(store.url),
                    "spec": spec.raw,
                    "roof": roof,
                    "overheads": store.profiles.overheads(machine_id),
                    "overhead_fits": store.profiles.overhead_fits(machine_id),
                }
            )
            session.run()
        finally:
            for worker in workers:
                worker.close()
    wall = time.perf_counter() - started
    run_ids = store_pair(store, session, machine_id, spec.raw, preset, wall)
    return AbOutcome(baseline, candidate, run_ids[0], run_ids[1], len(session.cases()), session.cases_interleaved, wall)


def store_pair(
    store: Store, session: Session, machine_id: int, spec: dict[str, Any], preset: str | None, wall: float
) -> tuple[int, int]:
    """Both sides' runs, done, tagged with their revisions and with the pair. A write that fails
    part way marks the runs written so far failed: never a done run without its partner."""
    run_ids: list[int] = []
    try:
        for side in session.sides:
            revision = side.worker.revision
            run_id = store.results.start_run(
                machine_id=machine_id, spec=spec, code_version=revision.short, model_id=side.model_id, preset=preset
            )
            run_ids.append(run_id)
            for record in side.records():
                store.results.record_case(run_id, record)
            store.annotations.add_tag(run_id, revision.tag)
        pair = f"{AB_TAG_PREFIX}{run_ids[0]}-{run_ids[1]}"
        for run_id in run_ids:
            store.annotations.add_tag(run_id, pair)
            store.results.finish_run(run_id, "done", wall_seconds=wall)
    except BaseException:
        for run_id in run_ids:
            store.results.finish_run(run_id, "failed", error="the A/B session's runs were not all stored")
        raise
    return run_ids[0], run_ids[1]
