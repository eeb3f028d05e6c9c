"""What a background store write does to the timing samples around it: 50 ms steady samples of a
static 64-token generation (the quick model's shape, untrained: timing needs no training), pinned,
in three modes alternated in blocks: no background writes, a thread writing a worker's last-seen
time into a real SQLite store every ``--every`` seconds whenever it likes (what the run's heartbeat
did), and the same thread waiting for the gap between two samples (runner.measure.quiet, what it
does now).

    python benchmarks/heartbeat_noise.py [--samples 150] [--every 0.5] [--blocks 2]

Prints ``heartbeat_slow_samples_<mode>=`` (samples more than 5% above the mode's median, over
every block), ``heartbeat_largest_slowdown_<mode>=`` (the slowest sample over the median, less 1)
and ``heartbeat_writes_<mode>=`` (the writes made while that mode's samples ran), for modes
``none``, ``anywhere`` and ``between_samples``. A beat every 0.5 s puts ten times as many beats
into the samples as the run's 5 s heartbeat does, so that a block shows them. Say the load it
ran under: the ``none`` mode's count is the host's own.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

MODES = ("none", "anywhere", "between_samples")
SLOW = 1.05  # a sample this far above its mode's median is slow


@contextlib.contextmanager
def background_writes(store_url: str, every_seconds: float, mode: str, writes: list[int]) -> Iterator[None]:
    """A thread updating a worker row every ``every_seconds`` while the block runs (none for mode
    ``none``), waiting for the gap between samples in mode ``between_samples``."""
    from sqlalchemy import update

    from runner.execution.worker import register
    from runner.measure import quiet
    from store.schema import Worker, utc_now
    from store.store import Store

    if mode == "none":
        yield
        return
    store = Store(store_url)
    worker = register(store, "run", 60)
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every_seconds):
            gap = quiet.between_samples() if mode == "between_samples" else contextlib.nullcontext()
            with gap, store.write() as session:
                session.execute(update(Worker).where(Worker.id == worker.id).values(last_seen_at=utc_now()))
            writes[0] += 1

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(every_seconds + 5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=150, help="samples per mode and block")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between background writes")
    parser.add_argument("--blocks", type=int, default=2, help="blocks of every mode, alternated")
    arguments = parser.parse_args()
    if arguments.samples < 10 or arguments.blocks < 1 or not 0.01 <= arguments.every <= 60:
        print(
            f"--samples {arguments.samples}, --blocks {arguments.blocks}, --every {arguments.every}: samples must be "
            "10 or more, blocks 1 or more, every between 0.01 and 60 seconds",
            file=sys.stderr,
        )
        return 2
    import torch

    from runner.decoding.decode import generate
    from runner.measure.pinning import pinned
    from runner.measure.timing import Harness, loops_for_seconds
    from runner.model.gpt import CharGPT, ModelConfig

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = CharGPT(ModelConfig(vocab_size=96, d_model=128, n_layer=3, n_head=4, context_length=1024)).eval()

    def call() -> object:
        return generate(model, list(range(20)), 64, temperature=0.0, impl="static")

    harness = Harness("cpu")
    call()
    loops = loops_for_seconds(harness.time_once(call))
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    writes = {mode: [0] for mode in MODES}
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'heartbeat.db'}"
        for block in range(arguments.blocks):
            for mode in MODES:
                with background_writes(url, arguments.every, mode, writes[mode]), pinned():
                    seconds[mode] += [harness.time_once(call, loops) for _ in range(arguments.samples)]
            print(f"block {block + 1} of {arguments.blocks} done", file=sys.stderr)
    for mode in MODES:
        median = statistics.median(seconds[mode])
        print(f"heartbeat_slow_samples_{mode}={sum(value > SLOW * median for value in seconds[mode])}")
        print(f"heartbeat_largest_slowdown_{mode}={max(seconds[mode]) / median - 1:.4f}")
        print(f"heartbeat_writes_{mode}={writes[mode][0]}")
    print(f"heartbeat_samples_per_mode={arguments.samples * arguments.blocks}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
