"""N worker processes claim and finish M empty jobs; prints claims per second on SQLite and,
when DECODELAB_TEST_PG_URL (or --pg URL) names a server, PostgreSQL (in a throwaway schema).
Every job must be claimed exactly once and no lock error may escape, else it exits 1.
Target: at least 100 claims/s on PostgreSQL with N = 8, M = 400 on the 2-core machine.

    python benchmarks/queue_throughput.py [--workers 8] [--jobs 400] [--pg URL]

Each worker is a machine of its own (one timing job per machine would otherwise serialize
them) and goes through the real queue: claim (with the per-machine check), then finish under
its claim.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from scratch_store import scratch_schema

from store import frames
from store.store import Store


def drain(url: str, number: int, ready: Any, start: Any, out: Any) -> None:
    """One worker: claim and finish until the queue is empty; report the ids or the error."""
    try:
        store = Store(url, upgrade=False)
        me = store.workers.register(
            name=f"bench:{os.getpid()}",
            kind="worker",
            machine_name=f"bench-{number}",
            host="bench",
            pid=os.getpid(),
            stale_after_seconds=60,
        )
        ready.put(number)
        start.wait()
        claimed = []
        while (job := store.jobs.claim(me)) is not None:
            store.jobs.finish(job.claim, "done")
            claimed.append(job.id)
        store.workers.stop(me.id)
        store.close()
        out.put((number, claimed, None))
    except Exception as error:  # reported, and fails the benchmark
        out.put((number, [], f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"))


def claims_per_second(url: str, workers: int, jobs: int) -> float:
    store = Store(url, upgrade=True)
    enqueued = {store.jobs.enqueue({}) for _ in range(jobs)}
    context = multiprocessing.get_context("spawn")
    ready, start, out = context.Queue(), context.Event(), context.Queue()
    processes = [context.Process(target=drain, args=(url, number, ready, start, out)) for number in range(workers)]
    for process in processes:
        process.start()
    for _ in processes:
        ready.get(timeout=120)
    began = time.perf_counter()
    start.set()
    results = [out.get(timeout=600) for _ in processes]
    elapsed = time.perf_counter() - began
    for process in processes:
        process.join(timeout=60)
    errors = [error for _, _, error in results if error]
    claimed = [job for _, ids, _ in results for job in ids]
    statuses = set(frames.jobs(store, limit=jobs + 1)["status"])
    store.close()
    if errors:
        raise SystemExit(f"a worker failed: {errors[0]}")
    if sorted(claimed) != sorted(enqueued) or statuses != {"done"}:
        raise SystemExit(
            f"not every job exactly once: {len(claimed)} claims of {len(set(claimed))} jobs "
            f"(enqueued {len(enqueued)}), statuses {sorted(statuses)}"
        )
    busy = sum(1 for _, ids, _ in results if ids)
    print(f"  {workers} workers ({busy} claimed at least one), {jobs} jobs in {elapsed:.2f} s")
    return jobs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--pg", default=os.environ.get("DECODELAB_TEST_PG_URL"))
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        sqlite_rate = claims_per_second(f"sqlite:///{Path(directory) / 'queue.db'}", arguments.workers, arguments.jobs)
    print(f"sqlite      {sqlite_rate:10,.0f} claims/s")
    print(f"claims_per_second_sqlite={sqlite_rate:.0f}")
    if arguments.pg:
        with scratch_schema(arguments.pg) as url:
            postgres_rate = claims_per_second(url, arguments.workers, arguments.jobs)
        print(f"postgresql  {postgres_rate:10,.0f} claims/s  (target 100)")
        print(f"claims_per_second_postgresql={postgres_rate:.0f}")


if __name__ == "__main__":
    main()
