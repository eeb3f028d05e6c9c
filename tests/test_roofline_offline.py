"""The roofline checked against the other machine's files, offline (nothing measured): the
fast-path figures and speculative verdict from a machine profile's JSON and a benchmark's lines
(benchmarks/roofline_predict.py --profile), and the speculative speedup with the loop's own costs
recomputed from each machine's imported quick run (benchmarks/speculative_roofline_check.py).

The files are the two machines' (shared/runs, copied into tests/fixtures): the AMD EPYC's
profile, benchmark lines and `roofline_predict.py --measure` output, and its quiet quick run;
the Intel Xeon's benchmark lines, the profile of the Xeon VM of issue 26 (tests/fixtures/
xeon-amx-profile.json: the shared runs hold no Xeon profile) and its quick run (made before the
roofline: no profile of its own). A third CPU's files (tests/fixtures/xeon16-*: a 16-core Xeon,
family 6 model 207, 2 MiB of L2 a core, measured quiet on 2026-12-05): its profile, benchmark
lines and `roofline_predict.py --bench` output from the store holding that profile, and a quick
run of its own, exported with the profile it was judged on (measured again by that run's
store). A fourth CPU's files (tests/fixtures/epyc-zen5-*: an AMD EPYC of family 26, Zen 5,
1 MiB of L2 a core, measured quiet on 2026-12-05): the same four, its quick run exported with the
roof stored under the host's other fingerprint. And the held-out speculative spec's runs
(tests/fixtures/*-held-out.json.gz): on two Xeons with a 2 MiB L2 (the Xeon VM's of 2026-12-05
09:00 UTC, the third CPU's of 19:32), whose 2.1 MB target sits at the L2's edge, and on the Zen 5
EPYC (22:28 UTC)."""

from __future__ import annotations

import gzip
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.cost.roofline_model import Shape
from runner.cost.speculative import (
    TURN_PROPOSALS,
    LoopResidual,
    fitted_loop_overhead,
    loop_break_even_acceptance,
    loop_overhead_seconds,
    loop_speedup,
    pass_in_steps,
)
from runner.experiments.parts.roofline_placement import (
    LoopParts,
    earlier_loop_residuals,
    loop_parts,
    named_draft_pass,
)
from runner.metrics import lookup
from store.records import RecordedMeasurement
from tests.conftest import FIXTURES, ROOT, _cli_environment, run_decodelab

PREDICT = ROOT / "benchmarks" / "roofline_predict.py"
CHECK = ROOT / "benchmarks" / "speculative_roofline_check.py"


def run_script(script: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=_cli_environment({}),
    )


def name_values(printed: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in printed.splitlines() if "=" in line and " " not in line)


# What roofline_predict.py prints from a profile alone: offline it must equal the machine's own run.
PREDICTED_FIGURES = (
    "fast_predicted_us_per_token",
    "fast_int8_predicted_us_per_token",
    "fast_verify_k4_predicted_steps",
    "fast_int8_draft_break_even_acceptance",
)


def predicted_offline(machine: str, *more_bench: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """roofline_predict.py on ``machine``'s profile and bench lines (and ``more_bench`` files),
    asserted to reproduce every PREDICTED_FIGURES line of its run on the machine itself."""
    bench = [str(FIXTURES / f"{machine}-bench.txt"), *more_bench]
    result = run_script(
        PREDICT, "--profile", str(FIXTURES / f"{machine}-profile.json"), *(f"--bench={path}" for path in bench)
    )
    assert result.returncode == 0, result.stderr
    offline = name_values(result.stdout)
    on_the_machine = name_values((FIXTURES / f"{machine}-roofline-predict.txt").read_text())
    for name in PREDICTED_FIGURES:
        assert offline[name] == on_the_machine[name], name
    return result, offline


def import_fixture_runs(names: tuple[str, ...], url: str, directory: Path) -> None:
    """Each tests/fixtures/NAME.json.gz unpacked into ``directory`` and put in ``url`` through
    `decodelab import`, in order (run 1, 2, ...)."""
    for name in names:
        unpacked = directory / f"{name}.json"
        with gzip.open(FIXTURES / f"{name}.json.gz", "rb") as packed, unpacked.open("wb") as out:
            shutil.copyfileobj(packed, out)
        result = run_decodelab("import", str(unpacked), "--db", url, cwd=directory)
        assert result.returncode == 0, result.stderr


def checked_run(url: str, run: str, *more: str) -> tuple[str, dict[str, str]]:
    """speculative_roofline_check.py on ``run`` of ``url`` (and ``more`` arguments), asserted to
    succeed: its output and its ``name=value`` figures."""
    result = run_script(CHECK, "--db", url, "--run", run, *more)
    assert result.returncode == 0, result.stderr
    return result.stdout, name_values(result.stdout)


def verdicts(figures: dict[str, str], name: str) -> tuple[int, int]:
    """(right, cases) of a ``fast_<name>`` count such as ``fast_clear_verdicts_right=8/9``."""
    right, cases = map(int, figures[f"fast_{name}"].split("/"))
    return right, cases


def test_the_epyc_figures_and_verdict_come_back_from_its_files_alone() -> None:
    """The offline run reproduces what `roofline_predict.py --measure` printed on the EPYC itself
    (from a store holding the same profile): every predicted figure and the wrong verdict."""
    result, offline = predicted_offline("epyc", str(FIXTURES / "epyc-roofline-predict.txt"))
    # The benchmark's own lines judged: the fast step within +4%, the verdict as printed there.
    assert "fast: memory-bound in L3" in result.stdout and "prediction error +10%" in result.stdout
    # The measured speedup is read back rounded as printed (0.75), so the error may move by a point.
    assert "measured acceptance 0.914: measured 0.75x, roofline 1.14x (error +5" in result.stdout
    assert offline["fast_int8_draft_k4_roofline_verdict"] == "wrong"


def test_the_xeon_figures_and_verdict_come_back_from_its_files_alone() -> None:
    """The Xeon's benchmark lines judged on the Xeon VM's profile (tests/fixtures: the shared runs
    hold none for the Xeon; docs/performance.md quotes what this command prints): the
    fast step within 5%, int8 within 15%, the verification within 10%, and the verdict right at
    the acceptance and speedup measured there (0.918, 1.32x: no file holds them, so given)."""
    result = run_script(
        PREDICT,
        "--profile",
        str(FIXTURES / "xeon-amx-profile.json"),
        "--bench",
        str(FIXTURES / "xeon-amx-bench.txt"),
        "--measured-acceptance",
        "0.918",
        "--measured-speedup",
        "1.32",
    )
    assert result.returncode == 0, result.stderr
    figures = name_values(result.stdout)
    bench = name_values((FIXTURES / "xeon-amx-bench.txt").read_text())
    for name, within in (("fast_us_per_token", 0.05), ("fast_int8_us_per_token", 0.15)):
        predicted = float(figures[name.replace("_us_", "_predicted_us_")])
        assert abs(predicted / float(bench[name]) - 1) <= within, name
    assert abs(float(figures["fast_verify_k4_predicted_steps"]) / float(bench["fast_verify_k4_steps"]) - 1) <= 0.10
    assert 0.5 < float(figures["fast_int8_draft_break_even_acceptance"]) < 0.6
    assert figures["fast_int8_draft_k4_roofline_verdict"] == "right"
    assert "fast: memory-bound" in result.stdout and "measured 79.5" in result.stdout


def test_the_third_cpus_figures_come_back_from_its_files_alone() -> None:
    """A third CPU checks the model too: offline, its profile and benchmark lines give back every
    figure printed there from the store, the fast step within 5%, the verification within 15%
    (memory-bound there: the Xeons' verification is cheap) and the int8 step's known shortfall
    (its kernel reaches 55% of the roof, so the roof's price is 25% short)."""
    result, offline = predicted_offline("xeon16")
    bench = name_values((FIXTURES / "xeon16-bench.txt").read_text())
    assert abs(float(offline["fast_predicted_us_per_token"]) / float(bench["fast_us_per_token"]) - 1) <= 0.05
    verify = float(offline["fast_verify_k4_predicted_steps"]) / float(bench["fast_verify_k4_steps"])
    assert abs(verify - 1) <= 0.15
    assert float(offline["fast_int8_predicted_us_per_token"]) < float(bench["fast_int8_us_per_token"])
    assert "fast verification of 5 positions: memory-bound" in result.stdout


def test_the_zen5_epycs_figures_and_verdict_come_back_from_its_files_alone() -> None:
    """A fourth CPU, an AMD EPYC of the next generation (Zen 5: two 512-bit multiply-adds a
    cycle where the Zen 4 EPYC had one), measured quiet on 2026-12-05: offline its files give back
    every predicted figure, the fast step within 5% and the verification within 15%, compute-bound
    as on the Zen 4 EPYC; and the speculative verdict, read from the benchmark's own k = 4 line,
    is right: fast_int8 at acceptance 0.958 wins 1.43x, above the roof's break-even acceptance."""
    result, offline = predicted_offline("epyc-zen5")
    bench = name_values((FIXTURES / "epyc-zen5-bench.txt").read_text())
    assert abs(float(offline["fast_predicted_us_per_token"]) / float(bench["fast_us_per_token"]) - 1) <= 0.05
    verify = float(offline["fast_verify_k4_predicted_steps"]) / float(bench["fast_verify_k4_steps"])
    assert abs(verify - 1) <= 0.15
    assert "fast verification of 5 positions: compute-bound" in result.stdout
    assert "measured acceptance 0.958: measured 1.43x" in result.stdout
    assert offline["fast_int8_draft_k4_roofline_verdict"] == "right"
    assert float(offline["fast_int8_draft_break_even_acceptance"]) < 0.958


def test_the_avx2_only_epycs_figures_and_wrong_verdict_come_back_from_its_files_alone() -> None:
    """A fifth CPU, a Zen 3 AMD EPYC with AVX2 and no AVX-512 (2026-12-07, code 4bc47d3): offline its
    files give back every predicted figure. The fast step is placed within 20%; the verification is
    compute-bound as on both Zen EPYCs, and its roof is a multiply-add rate the AVX2 kernel does not
    reach, so it is priced short (2.0 plain steps against 3.2 measured), and the speculative verdict
    is wrong there as on the Zen 4 EPYC: the fast int8 draft at k = 4 loses (0.72x) where the roof
    says it wins."""
    result, offline = predicted_offline("epyc-zen3")
    bench = name_values((FIXTURES / "epyc-zen3-bench.txt").read_text())
    assert bench["fast_verify_k4_steps"] and "avx2" in (FIXTURES / "epyc-zen3-profile.json").read_text()
    assert abs(float(offline["fast_predicted_us_per_token"]) / float(bench["fast_us_per_token"]) - 1) <= 0.20
    assert "fast verification of 5 positions: compute-bound" in result.stdout
    assert float(offline["fast_verify_k4_predicted_steps"]) < 0.75 * float(bench["fast_verify_k4_steps"])
    assert float(bench["best_fast_speculative_speedup"]) < 1
    assert "measured acceptance 0.976: measured 0.72x" in result.stdout
    assert offline["fast_int8_draft_k4_roofline_verdict"] == "wrong"


def test_a_file_that_is_no_profile_is_refused_in_one_line(tmp_path: Path) -> None:
    wrong = tmp_path / "bench.json"
    wrong.write_text('{"instruction_set": "avx2"}')
    result = run_script(PREDICT, "--profile", str(wrong), "--bench", str(FIXTURES / "epyc-bench.txt"))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"error: --profile: {str(wrong)!r} is not a machine profile (no peak_operations_per_second, bandwidth, "
        "sweep, caches)"
    ]
    neither = run_script(PREDICT, "--bench", str(FIXTURES / "epyc-bench.txt"))
    assert (
        neither.returncode != 0
        and neither.stderr.strip() == "error: give --profile FILE, or --db URL and --machine NAME"
    )


def test_the_loop_model_reproduces_a_loop_whose_own_overhead_it_is_given() -> None:
    """The algebra the prediction rests on: a loop's overhead taken from its own measured pass
    gives back its measured speedup (step priced as measured); more overhead lowers the speedup
    and raises the acceptance drafts need."""
    parts = LoopParts.price(
        step_seconds=40e-6, verify_seconds=90e-6, draft_token_seconds=12e-6, draft_call_seconds=20e-6
    )
    assert parts.draft_fixed_seconds == pytest.approx(8e-6) and parts.draft_call_seconds == pytest.approx(20e-6)
    overhead = loop_overhead_seconds(40e-6, 4.0, 0.8, parts.verify_seconds, 3.5, parts.draft_call_seconds)
    assert overhead == pytest.approx(40e-6 * 4.0 / 0.8 - 90e-6 - 3.5 * 20e-6)
    assert parts.speedup(4.0, 3.5, overhead) == pytest.approx(0.8)
    assert loop_speedup(4.0, 3.5, 40e-6, 90e-6, 20e-6, overhead + 10e-6) < 0.8
    cheap = loop_break_even_acceptance(4, 40e-6, 20e-6, 90e-6, 0.0)
    dear = loop_break_even_acceptance(4, 40e-6, 20e-6, 90e-6, 30e-6)
    assert cheap is not None and dear is not None and cheap < dear
    assert loop_break_even_acceptance(4, 40e-6, 20e-6, 90e-6, 200e-6) is None  # 5 tokens cannot pay for it
    # A draft call priced above what one was timed at keeps no negative fixed part.
    assert LoopParts.price(40e-6, 90e-6, 25e-6, 20e-6).draft_fixed_seconds == 0.0


def test_the_loops_overhead_is_fitted_on_its_schedules_cases_each_weighed_by_its_pass() -> None:
    """A residual is a difference of whole passes: an eager draft's 1.6 ms pass leaves a residual
    of 100 us where a table draft's 60 us passes leave 4-5, and the plain median of the two cases of
    a schedule is their mean (52 us). Weighted by 1 / pass² the table draft's decides; a case of
    another schedule joins only where its own schedule has none; ``None`` pools every schedule (a
    loop in one C++ call); no case, no fit."""
    table, eager = LoopResidual(4e-6, 60e-6, "fixed"), LoopResidual(100e-6, 1.6e-3, "fixed")
    other = LoopResidual(11e-6, 60e-6, "confidence")
    assert fitted_loop_overhead([table, eager, other], "fixed") == table.overhead_seconds
    assert fitted_loop_overhead([eager, table], "fixed") == table.overhead_seconds
    assert fitted_loop_overhead([table, eager], "confidence") == table.overhead_seconds
    assert fitted_loop_overhead([table, eager, other], "confidence") == other.overhead_seconds
    assert fitted_loop_overhead([other, LoopResidual(2e-6, 60e-6, "fixed"), table, eager], None) == 4e-6
    assert fitted_loop_overhead([], "fixed") is None
    # From a run's earlier records: a case of the impl and its loop's kind with all four figures.
    figures = {"target_step_seconds": 25e-6, "chars_per_target_pass_timed": 2.4, "speedup_median": 1.0}

    def case(
        draft: str, schedule: str, overhead: float, compiled: bool, impl: str = "fast"
    ) -> list[RecordedMeasurement]:
        params = {"part": "speculative", "draft": draft, "schedule": schedule, "impl": impl}
        own = {**figures, "roofline_loop_overhead_seconds": overhead, "roofline_loop_compiled": float(compiled)}
        return [RecordedMeasurement(params, metric, value, "") for metric, value in own.items()]

    rows = [
        *case("bigram", "fixed", 4e-6, False),
        *case("int8", "confidence", 9e-6, False),
        *case("fast_int8", "fixed", -3e-6, True),
        *case("bigram", "fixed", 7e-6, False, impl="static"),
        *[row for row in case("ngram", "fixed", 5e-6, False) if row.metric != "speedup_median"],  # cannot join
    ]
    residuals = earlier_loop_residuals(rows, "fast", compiled=False)
    assert residuals == [LoopResidual(4e-6, 60e-6, "fixed"), LoopResidual(9e-6, 60e-6, "confidence")]
    assert [residual.overhead_seconds for residual in earlier_loop_residuals(rows, "fast", compiled=True)] == [-3e-6]


def test_the_speedup_is_over_the_measured_plain_step_not_the_roofs_price_of_it() -> None:
    """A pass is predicted against the plain decoding it was timed beside: where the roof prices
    the plain step a third short (a target at a cache's edge: 25 us priced, 36 measured), a loop
    whose overhead was fitted against the measured step gives back its measured speedup only when
    weighed against that step, and 25/36 of it against the roof's; break-even moves the same way."""
    measured = {
        "target_step_seconds": 36e-6,
        "chars_per_target_pass_timed": 4.8,
        "speedup_median": 1.2,
        "mean_draft_calls": 4.0,
    }
    on_the_roof = LoopParts.price(25e-6, 43e-6, 6e-6, 14e-6, cache_refill_seconds=20e-6)
    weighed = LoopParts.price(25e-6, 43e-6, 6e-6, 14e-6, cache_refill_seconds=20e-6, plain_step_seconds=36e-6)
    assert on_the_roof.baseline_step_seconds == 25e-6 and weighed.baseline_step_seconds == 36e-6
    overhead = weighed.loop_overhead(measured)
    assert overhead == pytest.approx(on_the_roof.loop_overhead(measured))  # fitted against the measured step
    assert weighed.speedup(4.8, 4.0, overhead) == pytest.approx(1.2)
    assert on_the_roof.speedup(4.8, 4.0, overhead) == pytest.approx(1.2 * 25 / 36)
    # Against the roof's step no acceptance wins at all; against the measured one drafts need 0.89.
    assert on_the_roof.break_even_acceptance(4, overhead) is None
    assert weighed.break_even_acceptance(4, overhead) == pytest.approx(0.888, abs=0.005)


def test_two_models_that_fit_the_l2_alone_but_not_together_pay_a_cache_refill() -> None:
    """On the Xeon's roof (2 MiB of L2) the fast int8 draft's working set fits the L2 alone but not
    beside the float32 target's: each pass refills it, about half a plain step, as its loops spent
    beyond their standalone parts (about 40 us a pass, against the small draft's 10). On the EPYC's
    (1 MiB of L2) both already stream from L3, so nothing more is paid; a table draft reads one row.
    The refill is part of the pass: the loop overhead is measured net of it and added back."""
    shape = Shape(vocab=65, d_model=128, layers=3, heads=4)
    refills = {}
    for machine in ("xeon-amx", "epyc"):
        roof = json.loads((FIXTURES / f"{machine}-profile.json").read_text())
        for draft in ("bigram", "small", "fast_int8"):
            drafted = named_draft_pass(draft, shape, 64, 129)
            assert drafted is not None
            parts = loop_parts(shape, "fast", 4, 129, roof, drafted[0], 15e-6)
            refills[machine, draft] = parts.cache_refill_seconds / parts.step_seconds
    assert refills["xeon-amx", "fast_int8"] > 0.3
    assert refills["xeon-amx", "bigram"] < 0.01 < refills["xeon-amx", "small"] < refills["xeon-amx", "fast_int8"] / 2
    assert max(refills["epyc", draft] for draft in ("bigram", "small", "fast_int8")) < 0.05
    parts = LoopParts.price(40e-6, 90e-6, 12e-6, 20e-6, cache_refill_seconds=15e-6)
    measured = {"target_step_seconds": 40e-6, "chars_per_target_pass_timed": 4.0, "speedup_median": 0.8}
    overhead = parts.loop_overhead({**measured, "mean_draft_calls": 3.5})
    assert overhead == pytest.approx(40e-6 * 4.0 / 0.8 - 90e-6 - 3.5 * 20e-6 - 15e-6)
    assert parts.speedup(4.0, 3.5, overhead) == pytest.approx(0.8)


def test_a_draft_turn_pays_its_fixed_part_once_a_pass_not_once_a_proposal() -> None:
    """A table draft's turn is one Python call whose torch calls cost more than its lookups: in
    the Zen 5 EPYC's quick runs one proposal took 3.4-3.9 us and four 5.3-5.7. Timed as one (3.5)
    and as four (5.3), a proposal costs 0.6 and the turn's fixed part 2.9 is paid once a pass: a
    k = 4 pass's draft costs 5.3 us, where pricing every proposal at a whole one-proposal call said
    14. The loop's overhead is measured net of it and the prediction adds it back, so the measured
    speedup comes back; a run that timed no turn prices as before."""
    turn_one, turn_four = 3.5e-6, 5.3e-6
    parts = LoopParts.price(40e-6, 70e-6, 0.0, turn_one, draft_turn_seconds=turn_four)
    per_proposal = (turn_four - turn_one) / (TURN_PROPOSALS - 1)
    assert parts.draft_call_seconds == pytest.approx(per_proposal)
    assert parts.draft_turn_fixed_seconds == pytest.approx(turn_one - per_proposal)
    assert parts.draft_turn_fixed_seconds + TURN_PROPOSALS * parts.draft_call_seconds == pytest.approx(turn_four)
    measured = {
        "target_step_seconds": 40e-6,
        "chars_per_target_pass_timed": 3.0,
        "speedup_median": 1.1,
        "mean_draft_calls": 4.0,
    }
    overhead = parts.loop_overhead(measured)
    assert overhead == pytest.approx(40e-6 * 3.0 / 1.1 - 70e-6 - turn_four)
    assert parts.speedup(3.0, 4.0, overhead) == pytest.approx(1.1)
    # The turn's fixed part is part of what the draft costs a pass, in plain steps.
    costs = pass_in_steps(
        step_seconds=40e-6,
        verify_seconds=70e-6,
        draft_calls_per_pass=4.0,
        draft_call_seconds=parts.draft_call_seconds,
        draft_turn_fixed_seconds=parts.draft_turn_fixed_seconds,
        cache_refill_seconds=None,
        loop_overhead_seconds=overhead,
    )
    assert costs["draft"] == pytest.approx(turn_four / 40e-6) and "cache_refill" not in costs
    for untimed in (None, math.nan):
        old = LoopParts.price(40e-6, 70e-6, 0.0, turn_one, draft_turn_seconds=untimed)
        assert old.draft_turn_fixed_seconds == 0.0 and old.draft_call_seconds == turn_one
    # A turn timed faster than a one-proposal call (noise) leaves a proposal free, never negative.
    noisy = LoopParts.price(40e-6, 70e-6, 0.0, turn_one, draft_turn_seconds=3.0e-6)
    assert noisy.draft_call_seconds == 0.0 and noisy.draft_turn_fixed_seconds == pytest.approx(turn_one)
    # A model draft whose proposal the roof prices above its timed price (the small draft on the
    # Zen 5 EPYC: 2.1 us timed a proposal, 3.2 on the roof): a one-proposal turn is priced at the
    # roof's price, as before turns were timed, never at that price plus a fixed part on top.
    small = LoopParts.price(40e-6, 70e-6, 3.24e-6, 2.55e-6, draft_turn_seconds=8.77e-6)
    untimed_small = LoopParts.price(40e-6, 70e-6, 3.24e-6, 2.55e-6)
    assert small.draft_turn_fixed_seconds == 0.0
    assert small.draft_call_seconds == untimed_small.draft_call_seconds == pytest.approx(3.24e-6)
    declared = lookup("draft_turn_us")
    assert declared is not None and f"of {TURN_PROPOSALS} proposals" in declared.help


@pytest.fixture(scope="module")
def imported_quick_runs(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The machines' quick runs in one SQLite store, through `decodelab import` (EPYC run 1, Xeon
    run 2, the third CPU's run 3, the Zen 5 EPYC's run 4, the AVX2-only Zen 3 EPYC's run 5)."""
    directory = tmp_path_factory.mktemp("quick-runs")
    url = f"sqlite:///{directory / 'runs.db'}"
    import_fixture_runs(
        ("epyc-quick", "xeon-amx-quick", "xeon16-quick", "epyc-zen5-quick", "epyc-zen3-quick"), url, directory
    )
    return url


def test_the_loops_costs_put_the_epyc_speculative_cases_right(imported_quick_runs: str) -> None:
    """On the EPYC's quiet quick run the roofline without the loop's costs was 95% off (median)
    and called every fast case a win that lost; with them the fast impl's median |error| is within
    25% and every verdict right. The eager static target is withheld, not predicted."""
    output, figures = checked_run(imported_quick_runs, "1")
    assert float(figures["fast_median_abs_roofline_speedup_error"]) <= 0.25
    right, cases = verdicts(figures, "verdicts_right")
    assert cases == 14 and right == cases
    assert output.count("withheld (eager target)") == 14
    assert "static_median_abs_roofline_speedup_error" not in figures
    # What decides on the EPYC: its verification (a compute-bound pass of several positions).
    assert figures["fast_deciding_cost"] == "verification"
    assert 0.5 < float(figures["fast_break_even_acceptance"]) < 1.0


def test_the_xeon_run_without_a_roof_of_its_own_needs_one_given(imported_quick_runs: str) -> None:
    missing = run_script(CHECK, "--db", imported_quick_runs, "--run", "9")
    assert missing.returncode != 0
    assert missing.stderr.strip() == f"error: --run: no run 9 in {imported_quick_runs}"
    refused = run_script(CHECK, "--db", imported_quick_runs, "--run", "2")
    assert refused.returncode != 0
    assert refused.stderr.strip() == "error: --profile: run 2's machine xeon-amx has no stored roof; give one"
    _, figures = checked_run(imported_quick_runs, "2", "--profile", str(FIXTURES / "xeon-amx-profile.json"))
    assert float(figures["fast_median_abs_roofline_speedup_error"]) <= 0.25
    # Every case measured more than 10% from a tie is called right; the ties (bigram 1.03x and
    # 1.05x, fast_int8 0.94x) are predicted within 16% but on the other side of 1.0.
    right, cases = verdicts(figures, "clear_verdicts_right")
    assert cases >= 5 and right == cases
    right, cases = verdicts(figures, "verdicts_right")
    assert cases == 10 and right >= 7
    # What decides on the Xeon: the draft calls (its verification costs only 1.3 steps there).
    assert figures["fast_deciding_cost"] == "draft"
    assert 0.5 < float(figures["fast_break_even_acceptance"]) < 1.0


def test_the_loops_costs_put_the_third_cpus_speculative_cases_right(imported_quick_runs: str) -> None:
    """The third CPU's run carries its profile through the import: the fast impl's median |error|
    is within 25% (3.8%) and every case measured more than 10% from a tie is called right (the one
    miss is a tie: the n-gram draft's confidence schedule, measured 1.04x and predicted 1.00x). As
    on the EPYC, its verification decides, and speculative decoding wins there (1.8-1.9x with the
    fast int8 draft at k = 4)."""
    output, figures = checked_run(imported_quick_runs, "3")
    assert float(figures["fast_median_abs_roofline_speedup_error"]) <= 0.25
    right, cases = verdicts(figures, "clear_verdicts_right")
    assert cases >= 10 and right == cases
    right, cases = verdicts(figures, "verdicts_right")
    assert cases == 14 and right >= 13
    assert figures["fast_deciding_cost"] == "verification"
    assert "xeon16 fast: best predicted fast_int8 k=4" in output


def test_the_loops_costs_put_the_zen5_epycs_fast_int8_cases_right(imported_quick_runs: str) -> None:
    """The Zen 5 EPYC's run carries the roof it was judged on through its export (a roof stored
    under the host's other fingerprint). The fast impl's median |error| is within 25% (4.9%), every
    fast_int8 case (the loop in C++) is called right, and so is every case measured more than 10%
    from a tie in this run; its verification decides. In its three other quick runs one or two
    clear verdicts were wrong, each a table draft's (the loop in Python: bigram and n-gram, fixed k
    under-predicted and the confidence schedule over-predicted by 10-28%), because this run timed no
    draft turn and every proposal is priced at a whole one-proposal call (the test of pricing the
    turn below; docs/performance.md)."""
    output, figures = checked_run(imported_quick_runs, "4")
    assert float(figures["fast_median_abs_roofline_speedup_error"]) <= 0.25
    right, cases = verdicts(figures, "clear_verdicts_right")
    assert cases >= 8 and right == cases
    compiled = [line for line in output.splitlines() if line.startswith("fast   fast_int8")]
    assert len(compiled) == 6 and all("verdict right" in line for line in compiled)
    assert figures["fast_deciding_cost"] == "verification"
    assert "epyc5 fast: best predicted fast_int8 k=4" in output


def test_the_loops_costs_place_the_avx2_only_epycs_losses(imported_quick_runs: str) -> None:
    """The Zen 3 EPYC (AVX2, no AVX-512; its host unsteady: 72 of 80 timed cases 10% or more above
    the quickest): every fast speculative case loses there (0.03-0.90x), and with the run's own
    costs the roofline says so in 13 of 14, median |error| within 25% (23.7%). The one miss is the
    fast int8 draft at fixed k = 4 and temperature 0.7, measured 0.85x and priced at 1.08x; another
    run there missed the same case (docs/performance.md). The draft decides: the fast int8 draft's
    four proposals cost more plain steps than the verification."""
    output, figures = checked_run(imported_quick_runs, "5")
    assert float(figures["fast_median_abs_roofline_speedup_error"]) <= 0.25
    right, cases = verdicts(figures, "verdicts_right")
    assert cases == 14 and right == 13
    measured = [
        float(line.split("measured ")[1].split("x")[0]) for line in output.splitlines() if line.startswith("fast ")
    ]
    assert len(measured) == 14 and max(measured) < 1
    (miss,) = [line for line in output.splitlines() if line.startswith("fast ") and "verdict wrong" in line]
    assert miss.startswith("fast   fast_int8 fixed      T=0.7")
    assert figures["fast_deciding_cost"] == "draft"
    assert "epyc-zen3 fast: best predicted fast_int8 k=4" in output


def test_the_held_out_spec_on_two_xeons_gets_its_verdicts_right(tmp_path: Path) -> None:
    """Out of sample: the held-out spec (another seed, corpus and model shape) on the Xeon VM and
    the third CPU. Its 2.1 MB float32 target sits at the edge of their 2 MiB L2, where the roof
    priced its plain step at 40 and 25 us against 57 and 36 measured; weighed against the roof's
    step, every speedup came out 30% low (median |error| 0.30 and 0.31) and the fast int8 draft's
    fixed-k cases, which win 1.2x, were called losses. Weighed against the measured step (the
    speedup's own baseline), both runs are within 10% and every clear verdict is right. Their models
    stayed on their machines: the vocabulary comes from the spec's corpus, which this checkout holds."""
    url = f"sqlite:///{tmp_path / 'held-out.db'}"
    import_fixture_runs(("xeon-vm-held-out", "xeon16-held-out"), url, tmp_path)
    for run, machine in (("1", "xeon-vm"), ("2", "xeon16")):
        output, figures = checked_run(url, run)
        assert float(figures["fast_median_abs_roofline_speedup_error"]) <= 0.10, machine
        right, cases = verdicts(figures, "clear_verdicts_right")
        assert cases >= 10 and right == cases, machine
        fixed = [line for line in output.splitlines() if line.startswith("fast   fast_int8 fixed")]
        assert len(fixed) == 3 and all("verdict right" in line for line in fixed), machine


@pytest.fixture(scope="module")
def imported_held_out_runs(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The held-out spec's runs on three machines in one store: the Xeon VM's (run 1), the 16-core
    Xeon's (run 2) and the Zen 5 EPYC's (run 3, 2026-12-05 22:28 UTC)."""
    directory = tmp_path_factory.mktemp("held-out-runs")
    url = f"sqlite:///{directory / 'held-out.db'}"
    import_fixture_runs(("xeon-vm-held-out", "xeon16-held-out", "epyc-zen5-held-out"), url, directory)
    return url


def test_the_a_priori_prediction_meets_its_held_out_targets_on_three_machines(imported_held_out_runs: str) -> None:
    """Issue 45's deliverable 7, recomputed from the runs alone: on the held-out spec (another seed,
    corpus and model shape than any revision of the method was judged on) the a-priori speedup's
    median |error| is at most 5% and at least 90% of the sampled cases fall within 10%, per impl, on
    both Xeons and the Zen 5 EPYC (greedy cases are replays, left out)."""
    for run, machine in (("1", "xeon-vm"), ("2", "xeon16"), ("3", "epyc-zen5")):
        result = run_script(
            ROOT / "benchmarks" / "speculative_prediction.py", "--db", imported_held_out_runs, "--run", run
        )
        assert result.returncode == 0, result.stderr
        for impl in ("fast", "static"):
            line = next(
                line for line in result.stdout.splitlines() if line.startswith(f"{impl}: a_priori_error_median=")
            )
            figures = dict(part.split("=") for part in line.split()[1:3])
            assert float(figures["a_priori_error_median"]) <= 0.05, (machine, impl, line)
            assert float(figures["a_priori_within_10pct"]) >= 0.90, (machine, impl, line)


def test_the_held_out_spec_on_the_zen5_epyc_prices_its_compiled_loop_right(imported_held_out_runs: str) -> None:
    """On the Zen 5 EPYC the held-out fast cases are within 10% (median 1.9%) and every verdict is
    right. Its table drafts' confidence schedules (the loop in Python: bigram 0.89x measured, n-gram
    0.85x) were called wins (1.01x, 1.03x) while their loop's overhead was fitted as the plain
    median over every other Python-loop case: the fixed schedule's cheaper passes beside the eager
    int8 draft's, whose 1.6 ms pass leaves a residual of ±100 us. Fitted on its own schedule's
    cases, each weighted by 1 / pass² (runner.cost.speculative.fitted_loop_overhead), both are
    called losses."""
    output, figures = checked_run(imported_held_out_runs, "3")
    assert float(figures["fast_median_abs_roofline_speedup_error"]) <= 0.10
    assert verdicts(figures, "verdicts_right") == (14, 14)
    confidence = [
        line
        for line in output.splitlines()
        if line.startswith(("fast   bigram    confidence", "fast   ngram     confidence"))
    ]
    assert len(confidence) == 2 and all("verdict right" in line for line in confidence)


def test_pricing_the_draft_turn_once_a_pass_puts_the_zen5_epycs_table_drafts_right(tmp_path: Path) -> None:
    """Runs that timed their draft turns (the Zen 5 EPYC, 2026-12-06: quick run and held-out run,
    code b75f8ee), each checked twice: as recorded, and with ``draft_turn_us`` dropped, which prices
    every proposal at a whole one-proposal call as the runs before it were. A table draft's turn is
    one Python call whose fixed part (2.6-3.6 us) is most of a one-proposal call. With the loop's
    overhead fitted as the plain median of every other Python-loop case, pricing the turn once a
    pass took the quick run's median |error| from 8.7% to 3.5% and one more clear verdict right;
    fitted on the case's own schedule, weighted by 1 / pass² (which carries part of that error
    in the schedule's own residuals), it still takes the quick run's from 4.9% to 3.5%, and the
    held-out run's verdicts from 13 of 14 to 14 of 14. The quick run's one clear miss stays: the
    bigram draft at fixed k, measured 1.12x, predicted 1.00x (its characters per pass predicted
    5% low)."""
    figures = {}
    for name in ("epyc-zen5-turns-quick", "epyc-zen5-turns-held-out"):
        with gzip.open(FIXTURES / f"{name}.json.gz", "rt") as packed:
            rows = json.load(packed)
        assert any(row["metric"] == "draft_turn_us" for row in rows)
        for priced, kept in (("turns", rows), ("calls", [row for row in rows if row["metric"] != "draft_turn_us"])):
            path = tmp_path / f"{name}-{priced}.json"
            path.write_text(json.dumps(kept))
            url = f"sqlite:///{tmp_path / f'{name}-{priced}.db'}"
            assert run_decodelab("import", str(path), "--db", url, cwd=tmp_path).returncode == 0
            output, figures[name, priced] = checked_run(url, "1")
            bigram = next(line for line in output.splitlines() if line.startswith("fast   bigram    fixed"))
            assert ("turn fixed 0.0 us" in bigram) == (priced == "calls"), bigram
    quick_turns, quick_calls = figures["epyc-zen5-turns-quick", "turns"], figures["epyc-zen5-turns-quick", "calls"]
    error = "fast_median_abs_roofline_speedup_error"
    assert float(quick_turns[error]) < 0.04 < float(quick_calls[error])
    assert verdicts(quick_turns, "clear_verdicts_right") == verdicts(quick_calls, "clear_verdicts_right") == (9, 10)
    held_turns, held_calls = figures["epyc-zen5-turns-held-out", "turns"], figures["epyc-zen5-turns-held-out", "calls"]
    assert verdicts(held_turns, "verdicts_right") == (14, 14)
    assert verdicts(held_calls, "verdicts_right") == (13, 14)
    assert verdicts(held_turns, "clear_verdicts_right") == verdicts(held_calls, "clear_verdicts_right") == (8, 8)
    assert float(held_turns[error]) <= 0.10


def test_an_imported_run_whose_model_and_corpus_are_elsewhere_is_refused_in_one_line(tmp_path: Path) -> None:
    """Without a training summary, a stored model or its corpus here, the vocabulary is unknown:
    one line naming the run and the corpus, nothing predicted."""
    with gzip.open(FIXTURES / "xeon16-held-out.json.gz", "rt") as packed:
        rows = json.load(packed)
    for row in rows:
        row["run"]["spec"]["model"]["corpus"] = "elsewhere/corpus.txt"
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(rows))
    url = f"sqlite:///{tmp_path / 'moved.db'}"
    assert run_decodelab("import", str(moved), "--db", url, cwd=tmp_path).returncode == 0
    result = run_script(CHECK, "--db", url, "--run", "1")
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "error: --run: run 1 has no training summary, no stored model, "
        "and its corpus 'elsewhere/corpus.txt' is not here"
    ]
