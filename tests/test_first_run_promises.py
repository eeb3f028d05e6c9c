"""A first run that keeps its promises (issue 44, D8): training takes one thread on a busy
machine, a log that is not a terminal gets a progress line every 30 s, the estimate says the
load, and `make demo` ends with the commands that put the CLI to use."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import runner.model.train as train_module
from runner.execution import execute
from runner.measure import load
from runner.model.corpus import load_corpus
from runner.model.gpt import ModelConfig
from runner.model.progress import Ticker
from runner.model.train import TrainConfig, train
from tests.conftest import QUICK_SPEC, ROOT, run_decodelab


def test_the_ticker_is_due_once_per_interval() -> None:
    now = [0.0]
    ticker = Ticker(30.0, clock=lambda: now[0])
    seen = []
    for second in range(0, 100, 5):
        now[0] = float(second)
        seen.append(ticker.due())
    assert [second for second, due in zip(range(0, 100, 5), seen, strict=True) if due] == [30, 60, 90]


def test_a_busy_machine_trains_on_one_thread_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(execute, "DEFAULT_THREADS", 2)
    said: list[str] = []
    monkeypatch.setattr(load, "load_average", lambda: 6.0 * load.cores())
    assert execute.training_threads(said.append) == 1
    assert said == [
        f"the machine is busy (load average {6.0 * load.cores():.1f} on {load.cores()} cores): training on one thread"
    ]
    monkeypatch.setattr(load, "load_average", lambda: 0.0)
    assert execute.training_threads(said.append) == 0 and len(said) == 1  # torch's own count, nothing said
    assert load.busy(float(load.cores())) and not load.busy(load.cores() - 0.5)
    assert "expect longer" in load.load_note(6.0 * load.cores())
    assert "other work on the machine stretches it" in load.load_note(0.0)


def test_training_writes_a_progress_line_to_a_log_that_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every step is "30 s later" here: the clock is the test's, the lines are the code's.
    monkeypatch.setattr(train_module, "Ticker", lambda: Ticker(0.0))
    corpus = load_corpus()
    config = ModelConfig(vocab_size=len(corpus.vocabulary), d_model=16, n_layer=1, n_head=2, context_length=32)
    lines: list[str] = []
    train(config, TrainConfig(steps=3, batch_size=2, sequence_length=16), corpus, show_progress=False, log=lines.append)
    assert [line.split(",")[0] for line in lines] == ["training step 1/3", "training step 2/3", "training step 3/3"]
    assert all(", loss " in line for line in lines)


def test_make_demo_says_how_to_use_the_cli_after_the_sweep() -> None:
    recipe = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    sweep = recipe.index("decodelab run --preset quick")
    activate = recipe.index("source $(VENV)/bin/activate")
    dashboard = recipe.index("decodelab dashboard")
    assert sweep < activate < dashboard, "said after the sweep, before the dashboard holds the terminal"
    assert "$(VENV)/bin/decodelab" in recipe[activate:dashboard]


def test_make_demo_opens_with_the_sweeps_estimate(tmp_path: Path) -> None:
    """The demo's first command prints `decodelab run`'s own first line (the estimate, with the
    range of earlier runs once there are some, and that load stretches it), before anything runs."""
    import subprocess
    import sys

    recipe = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    first_command = recipe.split("\n")[1].strip()
    assert first_command == "@$(VENV)/bin/python -m runner.spec.calibrated_estimate --preset quick --db '$(DB)'"
    command = [sys.executable, "-m", "runner.spec.calibrated_estimate", "--preset", "quick", "--db"]
    said = subprocess.run(
        [*command, f"sqlite:///{tmp_path / 'new.db'}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(said) == 1 and said[0].startswith("the sweep: ") and "stretches it" in said[0], said
    refused = subprocess.run(
        [*command[:-3], "--preset", "nope", "--db", f"sqlite:///{tmp_path / 'other.db'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and refused.stdout.strip().startswith("error: --preset:")


@pytest.mark.slow
def test_the_run_says_first_what_this_sweep_took_here_before_and_that_load_stretches_it(tmp_path: Path) -> None:
    """`decodelab run`'s first line: the estimate, and once this machine has done runs of the very
    same spec, their own times' range beside it (D8), through the real CLI on a SQLite file."""
    from sqlalchemy.orm import Session

    from store.schema import Run
    from store.store import Store

    spec = tmp_path / "quick.toml"
    spec.write_text(QUICK_SPEC)
    url = f"sqlite:///{tmp_path / 'spread.db'}"
    first = run_decodelab("run", "--spec", str(spec), "--db", url, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    said = first.stderr.splitlines()[0]
    assert said.startswith("the sweep: ") and " cases, about " in said and "stretches it" in said, said
    assert "earlier runs of this sweep here" not in said, "nothing ran before: no spread to give"
    # Three earlier done runs of this spec here with known own times (run 1 and two copies of it),
    # and one of another spec that must not count.
    store = Store(url)
    with Session(store.engine) as session, session.begin():
        run = session.get(Run, 1)
        assert run is not None and run.status == "done"
        columns = ("machine_id", "model_id", "model_hash", "preset", "spec", "code_version", "status")
        copies = [Run(**{name: getattr(run, name) for name in columns}) for _ in range(3)]
        copies[2].spec = {**run.spec, "seed": 8}
        session.add_all(copies)
        started = run.started_at - timedelta(days=1)
        for hours, (each, seconds) in enumerate(zip([run, *copies], (130.0, 115.0, 150.0, 20.0), strict=True)):
            each.started_at = started + timedelta(hours=hours)
            each.finished_at = each.started_at + timedelta(seconds=seconds)
            each.wall_seconds = seconds
    store.close()
    second = run_decodelab("run", "--spec", str(spec), "--db", url, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    said = second.stderr.splitlines()[0]
    assert said.startswith("the sweep: ") and " cases, about " in said, said
    assert " (1 min 55 s–2 min 30 s over 3 earlier runs of this sweep here" in said, said
    assert "stretches it" in said and "plus this training" not in said, said  # the model is stored now
