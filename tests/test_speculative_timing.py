"""How the speculative experiment times its loop: pair i of every run generates the same seeded
text (what the review's matched test relies on), on every impl, steady or not."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from runner.decoding.drafts import BigramDraft
from runner.experiments.parts import speculative_timing
from tests.shared_parts import VOCAB, peaked_context

PAIRS = 3


@pytest.mark.parametrize("impl", ["static", "fast"])
def test_pair_i_generates_the_same_seeded_text_in_every_run(impl: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds: list[int] = []
    real = speculative_timing.speculative_decode

    def recording(*arguments: Any, **keywords: Any) -> Any:
        seeds.append(keywords["seed"])
        return real(*arguments, **keywords)

    monkeypatch.setattr(speculative_timing, "speculative_decode", recording)
    context = peaked_context(400, seed=7)
    draft = BigramDraft(torch.randint(0, VOCAB, (400,), generator=torch.Generator().manual_seed(1)), VOCAB)
    case = {"impl": impl, "new_tokens": 24, "temperature": 1.0, "pairs": PAIRS}
    pair_texts = []
    for _ in range(2):  # two runs
        seeds.clear()
        timed = speculative_timing.time_loop(case, context, draft, speculative_timing.Schedule("fixed", 3, 3))
        assert seeds[0] == context.seed, "the counted generation keeps the run's seed"
        # Every later call (warm-up, settling, the pairs) generates one of the pairs' texts, in pair order.
        assert seeds[1:] == sorted(seeds[1:])
        assert set(seeds[1:]) == {context.seed + 2 + pair for pair in range(PAIRS)}
        assert len(timed.paired.candidate_seconds) == PAIRS == len(timed.sessions)
        # What the counted figures pool: each pair's text once, however often a sample looped it.
        assert len(timed.timed) == PAIRS
        pair_texts.append([tuple(generation.tokens) for generation in timed.timed])
    assert pair_texts[0] == pair_texts[1]
