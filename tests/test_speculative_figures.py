"""The Speculative page's schedule, per-position and check figures, without a server."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.tables import cell_texts
from dashboard import speculative_figures


def test_the_per_position_curve_sits_beside_alpha_to_the_i_and_the_prediction() -> None:
    cases = speculative_figures.with_schedule(
        pd.DataFrame(
            {
                "draft": ["ngram", "small"],
                "k": [2, 4],
                "schedule": ["fixed", "confidence"],
                "temperature": [1.0, 1.0],
                "p_min": [None, 0.5],
                "acceptance_rate": [0.5, 0.8],
                "acceptance_rate_at_position_1": [0.6, 0.9],
                "acceptance_rate_at_position_2": [0.4, float("nan")],
                "predicted_acceptance_rate_at_position_1": [0.55, None],
            }
        )
    )
    assert list(cases["setting"]) == ["fixed k=2", "confidence p_min=0.5 (≤4)"]
    long = speculative_figures.position_curves(cases)
    curves = long.set_index(["draft", "position", "series"])["acceptance"]
    assert curves[("ngram", 1, "measured")] == 0.6
    assert curves[("ngram", 2, "i.i.d. α^i")] == pytest.approx(0.25), "α^i from the case's own acceptance rate"
    assert curves[("ngram", 1, "a priori")] == 0.55
    assert ("small", 2, "measured") not in curves.index, "no pass drafted position 2"
    chart = speculative_figures.position_chart(long).to_dict()
    # Lines carry the series' dash legend, the points on them none (theme.dashed_lines_with_points).
    assert [layer["encoding"]["strokeDash"]["field"] for layer in chart["layer"]] == ["series", "series"]


def test_the_choice_and_the_check_are_named_in_words() -> None:
    choice = pd.DataFrame(
        [
            {
                "impl": "fast",
                "temperature": 0.7,
                "drafts": ["bigram", "fast_int8"],
                "a_priori_choice_draft_index": 1,
                "a_priori_choice_schedule_index": 2,
                "a_priori_choice_k": 4,
                "a_priori_choice_p_min": 0.5,
                "a_priori_choice_speedup": 1.1,
                "measured_best_draft_index": 0,
                "measured_best_schedule_index": 0,
                "measured_best_k": 2,
                "measured_best_p_min": 0.0,
                "measured_best_speedup": 1.15,
                "a_priori_regret_measured": 0.0004,
                "a_priori_regret_noise_band": 0.08,
                "a_priori_regret_within_noise": 1.0,
            }
        ]
    )
    named = speculative_figures.choices(choice).iloc[0]
    assert named["a_priori_choice"] == "fast_int8 · confidence p_min=0.5 (≤4)"
    assert named["measured_best"] == "bigram · fixed k=2"
    # The regret as measured, never rounded to 0, with its band and flag; plain decoding lost here.
    assert "a_priori_regret" not in named.index
    assert named["a_priori_regret_measured"] == 0.0004 and bool(named["a_priori_regret_within_noise"])
    assert not named["plain_decoding_wins"]
    texts = cell_texts(speculative_figures.choices(choice)).iloc[0]
    assert texts["a_priori_regret_measured"] == "0.0004" and texts["a_priori_regret_within_noise"] == "yes"
    check = speculative_figures.check_verdicts(
        pd.DataFrame(
            {
                "distribution_check_passes": [1.0, 0.0],
                "chi2_pvalue": [0.4, 1e-9],
                "detectable_tv": [0.031, 0.031],
                "check_detects_accept_all": [1.0, 1.0],
                "check_detects_bonus_from_draft": [0.0, 1.0],
            }
        )
    )
    assert check["verdict"].iloc[0].startswith("✅ passes; TV ≥ 0.031 at the first position by the approximation alone")
    assert check["verdict"].iloc[1].startswith("❌")
    assert check["bugs_caught"].tolist() == ["accept_all", "accept_all, bonus_from_draft"]
    # A run with the reach: the statement only where the simulation backed it, per position.
    reached = speculative_figures.check_verdicts(
        pd.DataFrame(
            {
                "distribution_check_passes": [1.0, 1.0],
                "chi2_pvalue": [0.4, 0.5],
                "detectable_tv": [0.031, None],
                "samples_at_position_1": [3000.0, 40.0],
                "pooled_share_at_position_1": [0.012, 0.3],
                "detectable_tv_at_position_1": [0.031, None],
                "samples_at_position_2": [1200.0, None],
                "pooled_share_at_position_2": [0.05, None],
            }
        )
    )
    assert reached["verdict"].iloc[0] == (
        "✅ passes; rules out TV ≥ 0.031 at the first position between its bins (80% power); "
        "1.2% of its probability pooled as rare, unseen within"
    )
    assert reached["reach"].iloc[0] == "1: TV ≥ 0.031, 1.2% pooled; 2: no power statement, 5.0% pooled"
    assert "no power statement" in reached["verdict"].iloc[1] and "rules out" not in reached["verdict"].iloc[1]


def test_the_a_priori_accuracy_reads_against_its_targets_in_percent() -> None:
    accuracy = pd.DataFrame(
        {"impl": ["fast", "static"], "a_priori_error_median": [0.06264, 0.031], "a_priori_within_10pct": [0.6429, 0.95]}
    )
    assert speculative_figures.accuracy_lines(accuracy) == [
        "fast: median |error| 6.3%, 64.3% of cases within 10%, misses the median's and the share's target",
        "static: median |error| 3.1%, 95.0% of cases within 10%, meets both targets",
    ]
    texts = cell_texts(accuracy)
    assert texts["a_priori_error_median"].tolist() == ["6.3%", "3.1%"]
    assert texts["a_priori_within_10pct"].tolist() == ["64.3%", "95.0%"]
    just_the_share = accuracy.assign(a_priori_error_median=[0.04, float("nan")])
    assert speculative_figures.accuracy_lines(just_the_share) == [
        "fast: median |error| 4.0%, 64.3% of cases within 10%, misses the share's target"
    ]
    # 0.896 is not 90%: the share is said to a tenth of a percent, as the table shows it.
    near = pd.DataFrame({"impl": ["fast"], "a_priori_error_median": [0.01], "a_priori_within_10pct": [0.896]})
    assert speculative_figures.accuracy_lines(near) == [
        "fast: median |error| 1.0%, 89.6% of cases within 10%, misses the share's target"
    ]
    assert speculative_figures.accuracy_lines(near.assign(a_priori_within_10pct=["n/a"])) == []


def test_one_k_draws_each_drafts_band_as_a_bar_and_the_title_names_the_cases() -> None:
    from dashboard import charts

    cases = pd.DataFrame(
        {
            "draft": ["bigram", "small"],
            "k": [4, 4],
            "impl": ["fast", "fast"],
            "temperature": [1.0, 1.0],
            "speedup_median": [0.8, 1.2],
            "speedup_min": [0.7, 1.1],
            "speedup_max": [0.9, 1.4],
        }
    )
    shown = speculative_figures.shown_cases(cases, "at k = 4")
    assert shown == "at k = 4, the fast impl, T = 1"
    spec = charts.speedup_bands(cases, x="draft", shown=shown).to_dict()
    assert spec["title"] == "measured speedup, at k = 4, the fast impl, T = 1: median and min–max band (1 = baseline)"
    band = spec["layer"][0]["layer"][0]
    # An area over one x has no width: each draft's band is a bar from its min to its max.
    assert band["mark"]["type"] == "rule" and band["encoding"]["y2"]["field"] == "speedup_max"
    over_k = pd.concat([cases, cases.assign(k=2, speedup_median=[0.9, 1.1])], ignore_index=True)
    assert charts.speedup_bands(over_k).to_dict()["layer"][0]["layer"][0]["mark"]["type"] == "area"
    assert speculative_figures.shown_cases(over_k.assign(temperature=[1.0, 0.7, 1.0, 0.7]), "fixed k") == (
        "fixed k, the fast impl"
    )
    # A temperature missing on some rows is not one temperature.
    partly_missing = cases.assign(temperature=[1.0, float("nan")])
    assert speculative_figures.shown_cases(partly_missing, "at k = 4") == "at k = 4, the fast impl"
    # Without the colour's column, or with it all missing, the band still draws.
    assert charts.speedup_bands(cases.drop(columns="draft").assign(draft=None), x="k").to_dict()["layer"]
