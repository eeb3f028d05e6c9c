"""The compiled speculative loop (runner/decoding/csrc/speculative_loop.h) emits what the Python
loop emits, pass for pass, for every schedule and temperature, and leaves the draft where the
Python loop leaves it (a second generation through the same draft agrees too)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from runner.decoding import fast_loop
from runner.decoding.decode import generate
from runner.decoding.drafts import BigramDraft, ContextTableDraft, ModelDraft, NGramDraft
from runner.decoding.speculative import Schedule, SpeculativeResult, speculative_decode
from runner.model.gpt import CharGPT, ModelConfig
from runner.model.quantize import quantize_model
from tests.shared_parts import VOCAB, peaked_target


@pytest.fixture(scope="module")
def target() -> CharGPT:
    return peaked_target()


def fast_drafts(target: CharGPT) -> dict[str, ModelDraft]:
    torch.manual_seed(2)
    small = CharGPT(ModelConfig(vocab_size=VOCAB, d_model=16, n_layer=1, n_head=2, context_length=128)).eval()
    return {
        "fast_int8": ModelDraft(quantize_model(target, "int8", kernel="fast_int8"), "fast_int8", fast=True),
        "small": ModelDraft(small, "small", fast=True),
    }


def passes(result: SpeculativeResult) -> tuple[object, ...]:
    return (
        result.tokens,
        result.target_passes,
        result.proposed,
        result.accepted,
        result.accepted_histogram,
        result.accepted_per_pass,
        result.drafted_per_pass,
        result.draft_calls,
    )


SCHEDULES = [
    Schedule("fixed", 4, 4),
    Schedule("fixed", 1, 1),
    Schedule("heuristic", 2, 6),
    Schedule("confidence", 3, 5, 0.6),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda schedule: f"{schedule.kind}-{schedule.k}")
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("draft_name", ["fast_int8", "small"])
def test_the_compiled_loop_emits_what_the_python_loop_does(
    target: CharGPT, schedule: Schedule, temperature: float, draft_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_compiled_loops(monkeypatch)
    prompts = (([3, 1, 4], 11), ([3, 1, 4, 1, 5], 12), ([2], 13))
    compiled, python, _ = compiled_and_python(
        target, lambda: fast_drafts(target)[draft_name], draft_state, schedule, temperature, prompts
    )
    assert compiled == python
    assert calls == [70, 70, 70], "the first three generations ran in C++, the last three in Python"


def compiled_and_python(
    target: CharGPT,
    make_draft: Callable[[], Any],
    state_of: Callable[[Any], object],
    schedule: Schedule,
    temperature: float,
    prompts: tuple[tuple[list[int], int], ...],
) -> tuple[object, object, list[SpeculativeResult]]:
    """Generations through one fresh draft in the compiled loop, then through another in the Python loop
    (each later one starting from the state the earlier left): the same passes. Returns each draft's
    state after them and the compiled loop's results."""
    results, states = [], []
    for compiled in (True, False):
        draft = make_draft()
        results.append(
            [
                speculative_decode(
                    target,
                    draft,
                    0,
                    prompt,
                    70,
                    temperature=temperature,
                    seed=seed,
                    impl="fast",
                    schedule=schedule,
                    compiled_loop=compiled,
                )
                for prompt, seed in prompts
            ]
        )
        states.append(state_of(draft))
    for ours, python in zip(*results, strict=True):
        assert passes(ours) == passes(python)
        assert ours.total_variations == pytest.approx(python.total_variations, abs=1e-6)
    return states[0], states[1], results[0]


def draft_state(draft: ModelDraft) -> tuple[object, ...]:
    """What a draft carries into its next generation: its cache's length and contents, the tokens
    it fed and those it has not."""
    cache, pending = draft.loop_state()
    return (cache.length, cache.keys[..., : cache.length, :].tolist(), draft._fed, pending)


def test_a_draft_reused_after_a_longer_shared_prompt_agrees(target: CharGPT) -> None:
    """The second generation's prompt extends the first's output: the draft keeps that prefix's
    K/V (its prompt cache) and must feed only the rest, in either loop."""
    outputs = []
    for compiled in (True, False):
        draft = fast_drafts(target)["fast_int8"]
        first = speculative_decode(target, draft, 4, [3, 1, 4], 40, seed=1, impl="fast", compiled_loop=compiled)
        prompt = [3, 1, 4, *first.tokens[:30]]
        second = speculative_decode(target, draft, 4, prompt, 40, seed=2, impl="fast", compiled_loop=compiled)
        outputs.append((passes(first), passes(second), draft_state(draft)))
    assert outputs[0] == outputs[1]


def test_no_new_tokens_is_an_empty_generation(target: CharGPT) -> None:
    draft = fast_drafts(target)["fast_int8"]
    result = speculative_decode(target, draft, 4, [3, 1, 4], 0, impl="fast")
    assert (result.tokens, result.target_passes) == ([], 0)


def count_compiled_loops(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The new_tokens of every compiled loop run from here on, a model's draft or a table's."""
    calls: list[int] = []
    speculate, speculate_table = fast_loop.speculate, fast_loop.speculate_table

    def counted(*args: Any) -> Any:
        calls.append(args[3])
        return speculate(*args)

    def counted_table(*args: Any) -> Any:
        calls.append(args[5])
        return speculate_table(*args)

    monkeypatch.setattr(fast_loop, "speculate", counted)
    monkeypatch.setattr(fast_loop, "speculate_table", counted_table)
    return calls


def test_the_compiled_loop_runs_only_where_it_can(target: CharGPT, monkeypatch: pytest.MonkeyPatch) -> None:
    """The static impl, and a draft proposing in Python, keep the Python loop (same tokens either way)."""
    calls = count_compiled_loops(monkeypatch)
    tokens = torch.randint(0, VOCAB, (500,), generator=torch.Generator().manual_seed(1))
    small = fast_drafts(target)["small"]
    bigram = BigramDraft(tokens, VOCAB)

    class Unlisted(BigramDraft):
        """A table whose rows the loop is not told how to find."""

        def context_levels(self) -> None:
            return None

    results = [
        speculative_decode(target, draft, 3, [3, 1, 4], 40, temperature=1.0, seed=3, impl=impl)
        for draft, impl in (
            (small, "static"),
            (bigram, "static"),
            (Unlisted(tokens, VOCAB), "fast"),
            (small, "fast"),
            (bigram, "fast"),
        )
    ]
    assert calls == [40, 40], "the fast impl with a compiled model draft, then with the bigram table"
    assert results[0].tokens == results[3].tokens
    assert results[1].tokens == results[2].tokens == results[4].tokens


def table_drafts(target: CharGPT) -> dict[str, ContextTableDraft]:
    """Tables counted from the target's own text (so that proposals are often kept) with a stretch of
    random text (so that some contexts of a generation were never seen and the n-grams back off)."""
    text = [token for seed in range(3) for token in generate(target, [1], 100, impl="static", seed=seed).tokens]
    noise = torch.randint(0, VOCAB, (200,), generator=torch.Generator().manual_seed(6)).tolist()
    tokens = torch.tensor([1, *text, *noise])
    return {
        "bigram": BigramDraft(tokens, VOCAB),
        "ngram3": NGramDraft(tokens, VOCAB, order=3),
        "ngram5": NGramDraft(tokens, VOCAB, order=5),
    }


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda schedule: f"{schedule.kind}-{schedule.k}")
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("draft_name", ["bigram", "ngram3", "ngram5"])
def test_a_table_draft_in_the_compiled_loop_emits_what_the_python_loop_does(
    target: CharGPT, schedule: Schedule, temperature: float, draft_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_compiled_loops(monkeypatch)
    prompts = (([3, 1, 4], 11), ([3, 1, 4, 1, 5, 9, 2], 12), ([2], 13))
    compiled, python, results = compiled_and_python(
        target, lambda: table_drafts(target)[draft_name], lambda draft: draft.history(), schedule, temperature, prompts
    )
    assert compiled == python
    assert calls == [70, 70, 70], "the first three generations ran in C++, the last three in Python"
    kept = sum(result.accepted for result in results)
    assert 0 < kept < sum(result.proposed for result in results), "both outcomes of the accept rule were met"


def test_the_table_loop_refuses_what_it_cannot_read(target: CharGPT) -> None:
    from runner.decoding.fast import decoder_for

    decoder = decoder_for(target)
    tokens = torch.randint(0, VOCAB, (300,), generator=torch.Generator().manual_seed(2))
    table = NGramDraft(tokens, VOCAB, order=3).compiled_table(1.0)
    wider = NGramDraft(tokens, VOCAB + 1, order=3).compiled_table(1.0)
    assert table is not None and wider is not None
    cache = target.new_cache(capacity=64)
    draws = torch.rand(200, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="history: 1..2 tokens, got 3"):
        fast_loop.speculate_table(decoder, table, [1, 2, 3], cache, 3, 10, (0, 2, 2, 0.0), 1.0, draws)
    with pytest.raises(RuntimeError, match="vocabulary differs"):
        fast_loop.speculate_table(decoder, wider, [1, 2], cache, 3, 10, (0, 2, 2, 0.0), 1.0, draws)
    with pytest.raises(RuntimeError, match="ran past a cache or its uniforms"):
        fast_loop.speculate_table(decoder, table, [1, 2], cache, 3, 10, (0, 2, 2, 0.0), 1.0, draws[:5])
    outcome = fast_loop.speculate_table(decoder, table, [1, 2], cache, 3, 10, (0, 2, 2, 0.0), 1.0, draws)
    assert len(outcome.emitted) >= 10 and cache.length == len(outcome.emitted)


def test_a_context_number_too_large_for_int64_keeps_the_python_loop() -> None:
    tokens = torch.tensor([0, 1, 2, 1, 0])
    assert NGramDraft(tokens, 3, order=5).table_compiles()
    assert not NGramDraft(tokens, 2**16, order=5).table_compiles(), "65536^4 = 2^64 numbers"


def test_a_table_draft_follows_a_text_shorter_than_its_context(target: CharGPT) -> None:
    """After a loop whose whole text is shorter than the draft's context, the draft holds all of it."""
    histories = []
    for compiled in (True, False):
        draft = table_drafts(target)["ngram5"]
        result = speculative_decode(
            target, draft, 1, [2], 1, temperature=1.0, seed=3, impl="fast", compiled_loop=compiled
        )
        assert len(result.tokens) == 1
        histories.append(draft.history())
    assert histories[0] == histories[1] and len(histories[0]) >= 2
