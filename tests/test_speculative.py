"""Speculative decoding: greedy equivalence for every draft, a perfect draft is always
accepted, the output keeps the target's distribution, and counts reach the store."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from runner.decoding.accept_rule import accept_rule
from runner.decoding.decode import generate
from runner.decoding.drafts import DISTILLATION_WINDOW, BigramDraft, ModelDraft, NGramDraft, target_windows
from runner.decoding.speculative import Draft, speculative_decode
from runner.experiments.parts.distribution_check import BUG_VARIANTS, empirical, total_variation, tv_noise_bounds
from runner.experiments.parts.distribution_power import POWER, SIMULATION_SLACK
from runner.model.gpt import CharGPT, ModelConfig
from runner.model.quantize import quantize_model
from store import frames
from tests.shared_parts import VOCAB, peaked_target


@pytest.fixture(scope="module")
def target() -> CharGPT:
    return peaked_target()


def drafts(target: CharGPT) -> list[Draft]:
    tokens = torch.randint(0, VOCAB, (500,), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(2)
    small = CharGPT(ModelConfig(vocab_size=VOCAB, d_model=16, n_layer=1, n_head=2, context_length=128)).eval()
    return [
        BigramDraft(tokens, VOCAB),
        ModelDraft(quantize_model(target, "int8"), "int8"),
        ModelDraft(quantize_model(target, "int4", group_size=8), "int4"),
        NGramDraft(tokens, VOCAB, order=4),
        ModelDraft(small, "small", fast=True),
        ModelDraft(small, "small-eager"),
    ]


@pytest.mark.parametrize("draft_index", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_speculative_output_is_the_targets_greedy_output(target: CharGPT, draft_index: int, k: int) -> None:
    draft = drafts(target)[draft_index]
    expected = generate(target, [3, 1, 4], 60, temperature=0.0).tokens
    result = speculative_decode(target, draft, k, [3, 1, 4], 60, temperature=0.0)
    assert result.tokens == expected
    # Each pass emits its kept proposals and one more; the last pass crosses 60 characters.
    emitted = result.accepted + result.target_passes
    assert emitted >= 60 > emitted - (result.accepted_per_pass[-1] + 1)
    assert sum(result.accepted_histogram) == result.target_passes
    assert sum(length * passes for length, passes in enumerate(result.accepted_histogram)) == result.accepted


def test_a_draft_equal_to_the_target_is_always_accepted(target: CharGPT) -> None:
    result = speculative_decode(target, ModelDraft(target, "itself"), 4, [1], 50, temperature=1.0, seed=5)
    assert result.acceptance_rate == 1.0
    assert result.accepted_histogram[-1] == result.target_passes
    assert result.chars_per_target_pass == pytest.approx(5.0, abs=0.5)  # k + 1 per pass, cut at 50


@pytest.mark.slow
def test_the_whole_loop_keeps_the_targets_first_token_distribution(target: CharGPT) -> None:
    prompt = [2, 7]
    with torch.inference_mode():
        p = torch.softmax(target(torch.tensor([prompt]))[0, -1].double(), dim=-1)
    bigram = drafts(target)[0]
    runs = 3000
    first = torch.tensor(
        [speculative_decode(target, bigram, 2, prompt, 1, temperature=1.0, seed=seed).tokens[0] for seed in range(runs)]
    )
    _, bound = tv_noise_bounds(p, runs)
    assert total_variation(empirical(first, VOCAB), p) <= bound


def test_rejection_resamples_from_the_residual() -> None:
    assert accept_rule([0.0, 1.0], [1.0, 0.0], 0, 0.5, 0.3) == (False, 1)
    assert accept_rule([0.6, 0.4], [0.3, 0.7], 0, 0.99, 0.0) == (True, 0), "p > q: always kept"
    # p/q = 0.4/0.7: kept below that, else drawn from the residual (0.3, 0) / 0.3 -> token 0
    assert accept_rule([0.6, 0.4], [0.3, 0.7], 1, 0.5, 0.9) == (True, 1)
    assert accept_rule([0.6, 0.4], [0.3, 0.7], 1, 0.6, 0.9) == (False, 0)


def test_k_and_context_are_checked(target: CharGPT) -> None:
    with pytest.raises(ValueError, match="k must be in 1..16"):
        speculative_decode(target, drafts(target)[0], 17, [1], 5)
    with pytest.raises(ValueError, match="exceeds the model context"):
        speculative_decode(target, drafts(target)[0], 8, [1], 125)


def test_counts_are_recorded_through_the_store(filled_store_url: str) -> None:
    from store.store import Store

    store = Store(filled_store_url)
    rows = frames.measurements(store, int(frames.runs(store)["run_id"].min()), "speculative")
    for key in ("part", "draft", "impl", "k", "schedule", "temperature", "p_min"):
        rows[key] = rows["params"].map(lambda params, key=key: params.get(key))
    required = {
        "acceptance_rate",
        "chars_per_target_pass",
        "target_passes",
        "mean_accepted_length",
        "system_efficiency",
        "mean_draft_length",
        "acceptance_rate_at_position_1",
        "predicted_chars_per_pass",
        "tvd",
        "tvd_direct",
        "draft_cost_ratio",
        "verify_cost_ratio",
        "speedup_median",
        "speedup_min",
        "speedup_max",
        "writeup_formula_speedup",
        "component_model_speedup",
        "predicted_speedup_a_priori",
        "a_priori_relative_error",
        "alpha_a_priori",
        "expected_chars_per_pass",
        "chi2_pvalue",
        "samples_at_position_1",
        "pooled_share_at_position_1",
        "distribution_check_passes",
        *(f"check_detects_{variant}" for variant in BUG_VARIANTS),
        *(f"check_due_{variant}" for variant in BUG_VARIANTS),
        "a_priori_regret_measured",
        "a_priori_regret_noise_band",
        "a_priori_regret_within_noise",
        "a_priori_error_median",
        "a_priori_within_10pct",
        "greedy_matches_target",
        "target_pass_us",
        "draft_call_us",
        "draft_turn_us",
        "draft_cost_ratio_writeup",
    }
    assert required <= set(rows["metric"])
    # The old names meant something else; a new run never writes them, nor the retired regret
    # rounded to 0 inside its band (read back, an old run's is dropped: test_compatibility).
    assert not {"predicted_speedup", "predicted_speedup_refined"} & set(rows["metric"])
    assert "a_priori_regret" not in set(frames.export_rows(store, int(frames.runs(store)["run_id"].min()))["metric"])
    speculative = rows[rows["part"] == "speculative"]
    assert set(speculative["draft"]) == {"bigram", "ngram", "distilled_ngram", "int8", "int4", "small", "fast_int8"}
    assert set(speculative["schedule"]) == {"fixed", "heuristic", "confidence"}
    assert set(speculative["temperature"]) == {1.0, 0.7, 0.0}
    assert {params["k"] for params in speculative["params"]} == {1, 3, 4}, "ks, and k_max for confidence"
    greedy = rows[rows["metric"] == "greedy_matches_target"]
    assert set(greedy["temperature"]) == {0.0} and (greedy["value"] == 1.0).all()
    assert (rows.loc[rows["metric"] == "distribution_check_passes", "value"] == 1.0).all()
    # Each check states its reach per position, a power statement only where its simulation
    # backed it, and whether it kept its power only for the variants that were due.
    distribution = rows[rows["part"] == "distribution"]
    for _, case in distribution.groupby(distribution["params"].map(lambda params: str(sorted(params.items())))):
        recorded = case.set_index("metric")["value"]
        positions = [name for name in recorded.index if name.startswith("samples_at_position_")]
        assert recorded["samples_at_position_1"] == case["params"].iloc[0]["samples"] and len(positions) >= 1
        for position in range(1, len(positions) + 1):
            power = recorded.get(f"simulated_power_at_position_{position}")
            backed = power is not None and power >= POWER - SIMULATION_SLACK
            assert (f"detectable_tv_at_position_{position}" in recorded.index) == backed
        assert ("detectable_tv" in recorded.index) == ("detectable_tv_at_position_1" in recorded.index)
        for variant in BUG_VARIANTS:
            due = recorded[f"check_due_{variant}"] == 1.0
            assert (f"check_keeps_its_power_{variant}" in recorded.index) == due, variant
            if not due:
                continue
            assert recorded[f"effect_tv_{variant}"] > recorded["detectable_tv"]
            assert recorded[f"check_keeps_its_power_{variant}"] == recorded[f"check_detects_{variant}"]
    # The choice, recomputed here from the speculative cases: the a-priori model's pick is the
    # case it predicted fastest, the regret what that pick measured short of the measured best
    # (never rounded), flagged when within the noise band of the two cases' pairs.
    for impl in ("static", "fast"):
        for temperature in (1.0, 0.7, 0.0):
            chosen_cases = speculative[(speculative["impl"] == impl) & (speculative["temperature"] == temperature)]
            cases = chosen_cases.assign(p_min=chosen_cases["p_min"].fillna(0.0)).pivot_table(
                index=["draft", "schedule", "k", "p_min"], columns="metric", values="value", aggfunc="first"
            )
            picked: Any = cases["predicted_speedup_a_priori"].idxmax()
            best: Any = cases["speedup_median"].idxmax()
            choice = rows[(rows["part"] == "choice") & (rows["impl"] == impl) & (rows["temperature"] == temperature)]
            recorded = choice.set_index("metric")["value"]
            assert recorded["a_priori_choice_k"] == picked[2]
            assert recorded["a_priori_choice_p_min"] == picked[3]
            assert recorded["a_priori_choice_speedup"] == cases.loc[picked, "speedup_median"]
            assert recorded["measured_best_speedup"] == cases.loc[best, "speedup_median"]
            regret = cases.loc[best, "speedup_median"] - cases.loc[picked, "speedup_median"]
            band = (cases.loc[picked, "speedup_max"] - cases.loc[picked, "speedup_median"]) + (
                cases.loc[best, "speedup_median"] - cases.loc[best, "speedup_min"]
            )
            assert recorded["a_priori_regret_measured"] == pytest.approx(regret)
            assert recorded["a_priori_regret_noise_band"] == pytest.approx(band)
            assert recorded["a_priori_regret_within_noise"] == float(regret <= band)
        accuracy = rows[(rows["part"] == "accuracy") & (rows["impl"] == impl)].set_index("metric")["value"]
        errors = speculative.loc[
            (speculative["impl"] == impl) & (speculative["metric"] == "a_priori_relative_error"), "value"
        ].abs()
        assert accuracy["a_priori_error_median"] == pytest.approx(errors.median())
        assert accuracy["a_priori_within_10pct"] == pytest.approx((errors <= 0.1).mean())
    median_id = int(rows.loc[(rows["part"] == "aa") & (rows["metric"] == "speedup_median"), "measurement_id"].iloc[0])
    assert len(frames.samples(store, [median_id])) == 10, "five A/A pairs, both sides"


def test_recommend_prints_the_pick_per_impl_and_refuses_a_missing_run(filled_store_url: str) -> None:
    from store.store import Store
    from tests.conftest import ROOT, run_decodelab

    result = run_decodelab("recommend", "--run", "1", "--db", filled_store_url, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2 * 3, "one line per (impl, temperature)"
    assert all("predicted" in line and "measured" in line and "Why:" in line for line in lines)
    # Each line ranks plain decoding among the choices, names it the winner exactly where every
    # setup measured slower, and prints a regret of 0 only where the run measured 0.
    rows = frames.measurements(Store(filled_store_url), 1, "speculative")
    choice = rows[rows["params"].map(lambda params: params["part"] == "choice")]
    for line in lines:
        impl, temperature = line.split(":")[0].split(", temperature ")
        key = (impl, float(temperature))
        keys = choice["params"].map(lambda params: (params["impl"], params["temperature"]))
        recorded = choice[[found == key for found in keys]].set_index("metric")["value"]
        assert "ranked by measured speedup" in line and "plain decoding 1.00x" in line, line
        assert ("plain decoding wins" in line) == (recorded["measured_best_speedup"] < 1.0), line
        if recorded["a_priori_choice_predicted_speedup"] < 1.0:  # it recommends plain decoding: its regret
            assert ("plain decoding's regret 0 " in line) == (recorded["measured_best_speedup"] <= 1.0), line
        else:
            assert ("regret 0 " in line) == (recorded["a_priori_regret_measured"] == 0.0), line
    missing = run_decodelab("recommend", "--run", "999", "--db", filled_store_url, cwd=ROOT)
    assert missing.returncode == 2 and "--run: no run 999" in missing.stderr


def test_the_ngram_draft_backs_off_to_shorter_contexts() -> None:
    tokens = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 3])
    draft = NGramDraft(tokens, 5, order=3)
    after_0_1 = draft.log_distribution((0, 1)).exp()
    assert int(after_0_1.argmax()) == 2 and after_0_1[3] > after_0_1[4], "2 twice, 3 once, 4 never after 0 1"
    unseen = draft.log_distribution((4, 4)).exp()  # no context ends in 4: back off to the unigram
    assert torch.allclose(unseen, draft.log_distribution(()).exp())
    assert torch.allclose(after_0_1.sum(), torch.tensor(1.0))
    # The discounted mass goes to the shorter context: 3 follows 0 1 once in three, yet
    # interpolation with "after 1" (the same counts) and the unigram keeps 4 possible.
    assert 0.0 < after_0_1[4] < after_0_1[3] < 1 / 3


def test_a_distilled_ngram_proposes_the_targets_mean_distribution_after_each_context() -> None:
    """Each context the windows show gets the mean of the target's distributions after it; a context
    they never show keeps its counted row."""
    vocab = 4
    draft = NGramDraft(torch.tensor([0, 1, 2, 3, 0, 1, 3, 2, 1]), vocab, order=3)
    counted_after_3_2 = draft.log_distribution((3, 2)).clone()
    tokens = torch.tensor([[0, 1, 2], [2, 0, 1]])
    probabilities = torch.zeros(2, 3, vocab)
    probabilities[0, 1] = torch.tensor([0.1, 0.2, 0.3, 0.4])  # after 0 1 (and after 1)
    probabilities[1, 2] = torch.tensor([0.3, 0.2, 0.1, 0.4])  # after 0 1 again (and after 1)
    probabilities[0, 0] = probabilities[1, 1] = torch.tensor([0.0, 1.0, 0.0, 0.0])  # after 0
    probabilities[0, 2] = probabilities[1, 0] = torch.tensor([0.25] * 4)  # after 1 2 and after 2
    draft.distill([(tokens, probabilities)])
    after_0_1 = draft.log_distribution((0, 1)).exp()
    assert torch.allclose(after_0_1, torch.tensor([0.2, 0.2, 0.2, 0.4]))
    assert torch.allclose(draft.log_distribution((2, 0)).exp(), torch.tensor([0.0, 1.0, 0.0, 0.0]))
    assert torch.allclose(draft.log_distribution((1, 2)).exp(), torch.tensor([0.25] * 4))
    assert torch.equal(draft.log_distribution((3, 2)), counted_after_3_2), "never shown: its counted row"
    # The unigram: the mean over all six positions.
    assert torch.allclose(draft.log_distribution(()).exp(), probabilities.reshape(-1, vocab).mean(dim=0))
    draft.start([0, 1])
    assert draft.propose(1, 0.0, None)[0] == [3], "proposals read the distilled rows"


def test_target_windows_give_the_models_distributions_after_every_position(target: CharGPT) -> None:
    tokens = torch.randint(0, VOCAB, (700,), generator=torch.Generator().manual_seed(3))
    windows = list(target_windows(target, tokens, count=600))
    window = min(DISTILLATION_WINDOW, target.config.context_length)
    assert sum(len(batch) for batch, _ in windows) == 600 // window, "whole windows of the first 600 tokens"
    batch, distributions = windows[0]
    assert torch.equal(batch[0], tokens[:window])
    with torch.inference_mode():
        expected = torch.softmax(target(tokens[None, :window]).float(), dim=-1)[0]
    assert torch.allclose(distributions[0], expected, atol=1e-6)


def test_a_prompt_shorter_than_the_ngram_context_proposes_from_all_of_it() -> None:
    """An order-4 draft after a two-token prompt reads both tokens (its longest seen suffix), not the
    last one alone: after 0 1 comes 2, after 1 alone 3 as often."""
    tokens = torch.tensor([0, 1, 2, 0, 1, 2, 4, 1, 3, 4, 1, 3, 4, 1, 3])
    draft = NGramDraft(tokens, 5, order=4)
    draft.start([0, 1])
    proposals, rows = draft.propose(1, 0.0, None)
    assert proposals == [2]
    draft.start([4, 1])
    assert draft.propose(1, 0.0, None)[0] == [3]


def test_the_fast_small_draft_proposes_what_the_eager_one_does(target: CharGPT) -> None:
    *_, fast, eager = drafts(target)
    for draft in (fast, eager):
        draft.start([1, 2, 3])
    assert fast.propose(6, 0.0, None)[0] == eager.propose(6, 0.0, None)[0]
    for draft in (fast, eager):  # sampled: the same uniforms pick the same tokens
        draft.start([1, 2, 3])
    fast_tokens, fast_q = fast.propose(6, 1.0, torch.Generator().manual_seed(4))
    eager_tokens, eager_q = eager.propose(6, 1.0, torch.Generator().manual_seed(4))
    assert fast_tokens == eager_tokens
    assert torch.allclose(fast_q, eager_q, atol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_speculative_decoding_gives_the_same_tokens_through_either_impl(target: CharGPT, temperature: float) -> None:
    small = drafts(target)[4]
    outputs = [
        speculative_decode(target, small, 3, [3, 1, 4], 60, temperature=temperature, seed=8, impl=impl)
        for impl in ("static", "fast")
    ]
    assert outputs[0].tokens == outputs[1].tokens
    assert outputs[0].accepted_histogram == outputs[1].accepted_histogram
    with pytest.raises(ValueError, match="impl must be one of"):
        speculative_decode(target, small, 3, [3, 1, 4], 10, impl="naive")


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_the_compiled_verification_decides_as_the_python_rule(target: CharGPT, temperature: float) -> None:
    from runner.decoding.speculative import CompiledTarget, verify

    compiled = CompiledTarget(target)
    text = torch.randint(0, VOCAB, (40,), generator=torch.Generator().manual_seed(3)).tolist()
    outcomes = set()
    for trial in range(40):
        generator = torch.Generator().manual_seed(trial)
        k = 1 + trial % 5
        q = torch.softmax(torch.randn(k, VOCAB, generator=generator) * 2, dim=-1)
        # Half the trials propose the target's own continuation, so that some proposals are kept.
        proposals = (
            generate(target, text[:20], k, temperature=0.0).tokens
            if trial % 2
            else torch.multinomial(q, 1, generator=generator)[:, 0].tolist()
        )
        if temperature == 0.0:
            q = torch.nn.functional.one_hot(torch.tensor(proposals), VOCAB).float()
        verdicts = []
        for run_target in (compiled, compiled.decoder.forward):  # C++ rule, then Python's on the same pass
            cache = target.new_cache()
            compiled.decoder.forward(text[:19], cache)
            verdicts.append(
                verify(
                    run_target, cache, text[19], proposals, q, temperature, torch.Generator().manual_seed(99 + trial)
                )
            )
            assert cache.length == 19 + k + 1
        ours, python = verdicts
        assert (ours.accepted, ours.emitted) == (python.accepted, python.emitted)
        assert ours.total_variations == pytest.approx(python.total_variations, abs=1e-5)
        outcomes.add(ours.accepted == k)
    assert outcomes == {True, False}, "both branches of the rule ran"


@pytest.mark.parametrize("k", [1, 4])
def test_greedy_speculative_output_through_the_fast_path_is_its_greedy_output(target: CharGPT, k: int) -> None:
    expected = generate(target, [3, 1, 4], 60, temperature=0.0, impl="fast").tokens
    fast_int8 = ModelDraft(quantize_model(target, "int8", kernel="fast_int8"), "fast_int8", fast=True)
    for draft in (*drafts(target)[:2], fast_int8):
        result = speculative_decode(target, draft, k, [3, 1, 4], 60, temperature=0.0, impl="fast")
        assert result.tokens == expected, draft.name
    # The int8 draft proposes through the int8 kernel what its eager module proposes.
    eager_int8 = ModelDraft(fast_int8.model, "eager_int8")
    for draft in (fast_int8, eager_int8):
        draft.start([1, 2, 3])
    assert fast_int8.propose(6, 0.0, None)[0] == eager_int8.propose(6, 0.0, None)[0]


def test_recommend_names_the_roofline_regime_where_the_run_placed_the_verification() -> None:
    from cli.recommend import recommendations
    from store.records import RecordedMeasurement

    case = {"part": "speculative", "impl": "fast", "temperature": 1.0, "draft": "ngram", "schedule": "fixed", "k": 2}
    choice = {"part": "choice", "impl": "fast", "temperature": 1.0, "drafts": ["bigram", "ngram"]}
    picked = {
        "a_priori_choice_draft_index": 1,
        "a_priori_choice_schedule_index": 0,
        "a_priori_choice_k": 2,
        "a_priori_choice_p_min": 0.0,
        "a_priori_choice_predicted_speedup": 1.4,
        "a_priori_choice_speedup": 1.3,
        "measured_best_speedup": 1.35,
        "a_priori_regret_measured": 0.05,
        "a_priori_regret_noise_band": 0.1,
        "a_priori_regret_within_noise": 1.0,
    }
    measured = {"acceptance_rate": 0.5, "verify_cost_ratio": 1.2, "roofline_verify_regime": 0.0}
    rows = [RecordedMeasurement(case, metric, value, "ratio") for metric, value in measured.items()]
    rows += [RecordedMeasurement(choice, metric, value, "ratio") for metric, value in picked.items()]
    (line,) = recommendations(rows)
    assert line.startswith("fast, temperature 1: ngram, fixed k = 2; predicted 1.40x, measured 1.30x"), line
    assert "regret 0.05 as measured, within the pairs' noise band 0.1" in line, "measured, never rounded to 0"
    assert "the roofline places the verification memory-bound" in line
    assert "break even" not in line, "no break-even acceptance recorded, none printed"
    assert "plain decoding wins" not in line


def choice_rows(
    setups: dict[tuple[str, int], tuple[float, float, float]], picked: tuple[str, int], regret: float, band: float
) -> list:
    """A run's speculative rows: per (draft, k) its (median, min, max) speedup; a choice of ``picked``."""
    from store.records import RecordedMeasurement

    drafts = sorted({draft for draft, _ in setups})
    rows = []
    for (draft, k), (median, low, high) in setups.items():
        params = {
            "part": "speculative",
            "impl": "fast",
            "temperature": 1.0,
            "draft": draft,
            "schedule": "fixed",
            "k": k,
        }
        for metric, value in {"speedup_median": median, "speedup_min": low, "speedup_max": high}.items():
            rows.append(RecordedMeasurement(params, metric, value, "ratio"))
    choice = {"part": "choice", "impl": "fast", "temperature": 1.0, "drafts": drafts}
    values = {
        "a_priori_choice_draft_index": drafts.index(picked[0]),
        "a_priori_choice_schedule_index": 0,
        "a_priori_choice_k": picked[1],
        "a_priori_choice_p_min": 0.0,
        "a_priori_choice_predicted_speedup": 1.2,
        "a_priori_choice_speedup": setups[picked][0],
        "measured_best_speedup": max(median for median, _, _ in setups.values()),
        "a_priori_regret_measured": regret,
        "a_priori_regret_noise_band": band,
        "a_priori_regret_within_noise": float(regret <= band),
    }
    return rows + [RecordedMeasurement(choice, metric, value, "ratio") for metric, value in values.items()]


def test_recommend_says_plain_decoding_wins_and_ranks_it_among_the_setups() -> None:
    from cli.recommend import recommendations

    # Every setup measured slower than plain decoding (as the fast impl did on the development machine).
    setups = {("bigram", 2): (0.81, 0.78, 0.84), ("ngram", 2): (0.87, 0.85, 0.9), ("ngram", 4): (0.84, 0.8, 0.99)}
    (line,) = recommendations(choice_rows(setups, ("ngram", 4), regret=0.03, band=0.05))
    assert line.startswith("fast, temperature 1: plain decoding wins: every speculative setup measured slower"), line
    assert "the fastest setup, ngram, fixed k = 2, 0.87x, its pairs 0.85–0.90x, every pair slower" in line
    assert "regret 0.16 against plain decoding" in line and "regret 0.03 as measured, within" in line
    assert (
        "ranked by measured speedup (4 choices): 1. plain decoding 1.00x; 2. ngram, fixed k = 2 0.87x; "
        "3. ngram, fixed k = 4 0.84x (the pick); and 1 more." in line
    ), line
    # Speculative wins: plain decoding keeps its place in the ranking, printed past the head.
    setups = {(draft, k): (1.5 - 0.1 * k, 1.3 - 0.1 * k, 1.6) for draft in ("bigram", "ngram") for k in (1, 2, 3)}
    (line,) = recommendations(choice_rows(setups, ("bigram", 1), regret=0.0, band=0.2))
    assert "plain decoding wins" not in line and "regret 0 (the pick is the measured best)" in line
    assert line.count(". ") >= 3 and "… 7. plain decoding 1.00x" in line, line
    # A pick slower than plain decoding says so even when a faster setup exists; a tiny regret
    # beyond its band keeps its digits.
    setups = {("bigram", 1): (1.1, 1.05, 1.15), ("bigram", 2): (0.9, 0.89, 0.9)}
    (line,) = recommendations(choice_rows(setups, ("bigram", 2), regret=0.0004, band=0.0001))
    assert "regret 0.0004 as measured, beyond the pairs' noise band 0.0001" in line
    assert "the pick measured slower than plain decoding (by 0.1)" in line
    # A pick past the ranking's head is shown in its place, marked; places left out read "…".
    setups = {("bigram", k): (1.5 - 0.1 * k, 1.3 - 0.1 * k, 1.6) for k in (1, 2, 3, 4, 5)}
    (line,) = recommendations(choice_rows(setups, ("bigram", 5), regret=0.4, band=0.2))
    assert "3. bigram, fixed k = 3 1.20x; … 5. bigram, fixed k = 5 1.00x (the pick); 6. plain decoding" in line, line


def test_recommend_says_plain_decoding_where_the_prediction_puts_every_setup_below_it() -> None:
    """`recommend` named its best setup, predicted at 0.59x, as the pick (a user's tour)."""
    from dataclasses import replace

    from cli.recommend import recommendations

    setups = {("bigram", 1): (1.1, 1.05, 1.15), ("ngram", 2): (0.9, 0.89, 0.92)}
    rows = choice_rows(setups, ("ngram", 2), regret=0.2, band=0.05)
    rows = [row if row.metric != "a_priori_choice_predicted_speedup" else replace(row, value=0.59) for row in rows]
    (line,) = recommendations(rows)
    assert line.startswith(
        "fast, temperature 1: plain decoding: the a-priori prediction puts every speculative setup below plain "
        "decoding, so it recommends plain decoding; its best setup: ngram, fixed k = 2; predicted 0.59x"
    ), line
    # The regret and the ranking's pick are plain decoding's: bigram measured 1.10x, so 0.1 lost.
    assert "plain decoding's regret 0.1 as measured, against the fastest setup" in line, line
    assert "2. plain decoding 1.00x (the pick)" in line and "the pick measured slower" not in line, line
    # Where every setup also measured slower, the measurement leads and the prediction agrees.
    setups = {("bigram", 1): (0.95, 0.9, 0.99), ("ngram", 2): (0.9, 0.89, 0.92)}
    rows = choice_rows(setups, ("ngram", 2), regret=0.05, band=0.05)
    rows = [row if row.metric != "a_priori_choice_predicted_speedup" else replace(row, value=0.8) for row in rows]
    (line,) = recommendations(rows)
    assert "every pair slower). The a-priori prediction agrees: it puts every speculative setup below" in line, line
    assert "plain decoding's regret 0 (the measured best)" in line and "1. plain decoding 1.00x (the pick)" in line
