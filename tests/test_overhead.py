"""The overhead calibration: exact fits, exact multiplication counts, recorded through the store."""

from __future__ import annotations

import pytest

from runner.measure.fitting import fit_line, fit_line_relative
from store import frames


def test_fit_line_recovers_a_line() -> None:
    intercept, slope, error = fit_line([1e4, 1e5, 1e6], [4e-4 + 2e-10 * x for x in (1e4, 1e5, 1e6)])
    assert intercept == pytest.approx(4e-4) and slope == pytest.approx(2e-10) and error < 1e-9


def test_the_relative_fit_recovers_a_line_and_keeps_a_fast_steps_overhead_positive() -> None:
    """The fast impl's overhead points of a quick run on the 2-core Xeon VM (2026-12-07, store
    G run 4: d_model 8 to 256): plain least squares is the widest points' line, an intercept of
    −2.8 µs (negative seconds) missing the smallest step by 137%; on the relative errors, the
    intercept sits below the smallest step and the largest relative error is a third of that."""
    intercept, slope, error = fit_line_relative([1e4, 1e5, 1e6], [4e-4 + 2e-10 * x for x in (1e4, 1e5, 1e6)])
    assert intercept == pytest.approx(4e-4) and slope == pytest.approx(2e-10) and error < 1e-9
    mults = [4688.0, 13984.0, 46400.0, 166528.0, 627968.0, 2435584.0]
    seconds = [5.41e-6, 5.26e-6, 7.90e-6, 14.16e-6, 92.86e-6, 402.7e-6]
    plain, _, plain_error = fit_line(mults, seconds)
    relative, relative_slope, relative_error = fit_line_relative(mults, seconds)
    assert plain < 0 and plain_error > 1.3
    assert 0.5 * min(seconds) < relative < min(seconds) and relative_slope > 0 and relative_error < plain_error / 3


def test_the_overhead_fit_is_one_type_that_fits_records_and_predicts() -> None:
    from runner.cost.overhead_fit import OverheadFit

    mults = [1e4, 1e5, 1e6]
    fitted = OverheadFit.fit(mults, [4e-4 + 2e-10 * x for x in mults])
    assert fitted.widths_fitted == 3 and fitted.max_fit_error < 1e-9
    recorded = {record.metric: record.value for record in fitted.measurements()}
    assert OverheadFit.of(recorded).seconds(10, 5e6) == pytest.approx(10 * 4e-4 + 2e-10 * 5e6)
    with pytest.raises(RuntimeError, match="two widths"):
        OverheadFit.fit([1e4], [1e-3])


def test_the_overhead_experiment_records_a_fit_per_impl(filled_store_url: str) -> None:
    from dashboard.data import calibrated_prediction, part, wide_cases
    from store.store import Store

    store = Store(filled_store_url)
    run_id = int(frames.runs(store, experiment="overhead").iloc[0]["run_id"])
    cases = wide_cases(frames.measurements(store, run_id, "overhead"))
    fits = part(cases, "fit")
    assert set(fits["impl"]) == {"naive", "static", "fast"}
    assert (fits["widths_fitted"] == 2).all()
    points = part(cases, "point")
    assert len(points) == 6 and (points["seconds_per_token"] > 0).all()
    timing = part(wide_cases(frames.measurements(store, run_id, "kv_cache")), "timing")
    predicted = calibrated_prediction(timing, fits)
    # Two noisy widths may fit any slope: the prediction exists for every point, its sign is not a test.
    assert len(predicted) == len(timing) and predicted["predicted_seconds_cache"].notna().all()


def test_the_overhead_fit_runs_before_the_placements_that_add_it(filled_store_url: str) -> None:
    """Issue 44, D7: kv_cache comes before overhead in the spec files, but its roofline placements
    add the overhead fit: the fit runs first, so a first run's placements use this run's fit
    rather than none (which made every prediction miss by ×10)."""
    from runner.spec.sweeps import load_spec_file
    from store.store import Store
    from tests.conftest import TINY_SPEC

    spec = load_spec_file(TINY_SPEC)
    assert list(spec.raw["experiments"]).index("kv_cache") < list(spec.raw["experiments"]).index("overhead")
    order = list(dict.fromkeys(experiment.name for experiment, _ in spec.plan()))
    assert order[:3] == ["training_summary", "overhead", "kv_cache"], order
    store = Store(filled_store_url)
    measured = frames.measurements(store, int(frames.runs(store).iloc[0]["run_id"]))
    first = measured.groupby("experiment")["measurement_id"].min()
    assert first["overhead"] < first["kv_cache"], first.to_dict()


@pytest.mark.parametrize("impl", ["static", "fast"])
def test_each_fast_sample_of_a_point_is_its_own_placement(impl: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the fast impl every min-of-N sample of a width (and every A/A pair) packs the weights
    anew, and the packings are let go after; the eager impls have nothing to repack."""
    from runner.decoding import fast
    from runner.experiments.parts import overhead
    from tests.shared_parts import peaked_context

    calls: list[str] = []
    real_new, real_release, real_repack = fast.new_placements, fast.release_placements, fast.FastDecoder.repack

    def new(*models: object) -> None:
        calls.append("new")
        real_new(*models)  # type: ignore[arg-type]

    def repack(decoder: fast.FastDecoder) -> None:
        before = decoder._handle
        real_repack(decoder)
        calls.append("packed" if decoder._handle != before else "not packed")

    def release(*models: object) -> None:
        calls.append("release")
        real_release(*models)  # type: ignore[arg-type]

    monkeypatch.setattr(fast, "new_placements", new)
    monkeypatch.setattr(fast, "release_placements", release)
    monkeypatch.setattr(fast.FastDecoder, "repack", repack)
    context = peaked_context(200)
    shape = {"impl": impl, "d_model": 16, "n_layer": 1, "n_head": 2, "n": 8, "weights": "untrained"}
    records = overhead.point({**shape, "part": "point", "repeats": 3}, context)
    assert {record.metric for record in records} >= {"seconds_per_token", "mults_per_token"}
    # Each sample of the fast point ends with a new packing at a new address; static has none.
    assert calls == (["new", "packed"] * 3 + ["release"] if impl == "fast" else [])
    calls.clear()
    overhead.aa({**shape, "part": "aa", "pairs": 2}, context)
    assert calls == (["new", "packed"] * 2 + ["release"] if impl == "fast" else [])


def test_the_overhead_fit_refuses_a_width_without_a_positive_time() -> None:
    """Weighed by 1 / time², a zero time divided by zero; a NaN one made every figure NaN."""
    from runner.cost.overhead_fit import OverheadFit

    for bad in (0.0, float("nan"), -1e-6):
        with pytest.raises(RuntimeError, match="a positive time at every width"):
            OverheadFit.fit([1e4, 1e5, 1e6], [4e-4, bad, 6e-4])
