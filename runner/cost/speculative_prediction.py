"""The a-priori prediction of characters per pass, from calibration text and the schedule.

The write-ups' E = (1 − α^(k+1)) / (1 − α) assumes every proposal is kept with the same α,
independently. The loop's rejections cluster instead: hard stretches of text reject the first
proposal again and again, easy ones keep all k. So the prediction keeps α per position of a
calibration text: a_t = Σ min(p_t, q_t), the chance the accept rule keeps a proposal there (p the
target's and q the draft's distribution after the text's first t characters), and the draft's top
probability there. The calibration text is the target's own plain generations at the case's
temperature from the run's prompt (texts like the loop's, by generations that are not the timed
loop's: runner.experiments.parts.speculative_drafts.calibration_text). Given the text's own next
character y, a pass keeps a proposal there with chance min(1, q(y) / p(y)) (``kept_given_next``):
that is a_t on average, and a rejection comes with the character the draft found unlikely, as
the loop's next pass starts from. The confidence schedule's stops read the draft's top along the
text while the pass keeps its proposals (they are the text's characters), and past a rejected
one the draft's own proposals (``draft_rollouts``), as the loop's draft does.

``simulate`` then runs the schedule over that text: each pass asks the schedule for a length,
keeps proposal j with its chance at its position (seeded draws), and moves on by what it kept
plus one; its characters per pass, draft lengths, draft calls and per-position acceptance are the
prediction. A pass the confidence schedule stops early costs one draft call more than it drafted:
the draft computed the distribution that fell below p_min.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from runner.decoding.accept_rule import probabilities
from runner.decoding.speculative import Draft, Schedule, acceptance_at_positions
from runner.model.gpt import CharGPT

SIMULATION_REPEATS = 64  # passes over every calibration window, different draws each time


@dataclass(frozen=True)
class Calibration:
    """Per calibration window: the acceptance chance and the draft's top probability per position;
    the chance that a pass keeps the text's own next character there (``kept_given_text``, when
    the text is known); for the confidence schedule, also the top probabilities of the draft's own
    proposals from each position (``rollout_tops[window][position]``, one per proposal)."""

    acceptance: list[list[float]]
    draft_top: list[list[float]]
    rollout_tops: list[list[list[float]]] | None = None
    kept_given_text: list[list[float]] | None = None

    @property
    def kept_chances(self) -> list[list[float]]:
        """The chance a pass keeps a proposal at each position: given the text where known."""
        return self.kept_given_text or self.acceptance

    @property
    def alpha(self) -> float:
        """The mean acceptance chance (the write-ups' α)."""
        values = [value for window in self.acceptance for value in window]
        return sum(values) / len(values) if values else 0.0


@torch.inference_mode()
def calibrate(target: CharGPT, draft: Draft, windows: Sequence[list[int]], temperature: float) -> Calibration:
    """a_t and the draft's top probability at every position of every window (position t: the
    distributions after the window's first t + 1 characters)."""
    acceptance, tops, kept = [], [], []
    for window in windows:
        p = probabilities(target(torch.tensor([window], device=target.device))[0].float(), temperature).cpu()
        q = draft.distributions(window, temperature).float().cpu()
        acceptance.append(torch.minimum(p, q).sum(dim=-1).tolist())
        tops.append(confidences(draft, window, temperature, q))
        kept.append(kept_given_next(p, q, window) + acceptance[-1][-1:])  # the last: no next character
    return Calibration(acceptance, tops, kept_given_text=kept)


def kept_given_next(p: torch.Tensor, q: torch.Tensor, window: list[int]) -> list[float]:
    """At each position but the last, the chance that the accept rule keeps a proposal given that
    the pass emits the window's next character y there: min(1, q(y) / p(y)). The accept rule
    emits y kept with chance min(p(y), q(y)) and y resampled with p(y) − min(p(y), q(y)), so
    over y ~ p this averages to a_t; but a rejection comes with a character the draft found
    unlikely, which the next pass starts from (a table draft's context, a model draft's
    cache), as in the loop. Drawing keeps independently of the text ignored that."""
    following = torch.tensor(window[1:], dtype=torch.long).unsqueeze(1)
    target_next = p[:-1].gather(1, following).squeeze(1)
    draft_next = q[:-1].gather(1, following).squeeze(1)
    chance = torch.where(target_next > 0, (draft_next / target_next.clamp_min(1e-30)).clamp(max=1.0), 1.0)
    return chance.tolist()


@torch.inference_mode()
def draft_rollouts(
    draft: Draft, windows: Sequence[list[int]], temperature: float, length: int, seed: int, device: torch.device
) -> list[list[list[float]]]:
    """From every position of every window, the top probability of each of ``length`` proposals
    the draft makes along its own proposals, as the loop's draft does (the confidence schedule
    reads these; along the text instead, a draft that keeps proposing past what the target would
    reject looks surer than it is). The draft then follows the text by one character."""
    generator = torch.Generator(device=device).manual_seed(seed)
    rollouts = []
    for window in windows:
        draft.start(window[:1])
        tops = []
        # Every position a pass of the simulation starts from: room for a whole draft after it.
        for position in range(len(window) - length):
            proposals, q = draft.propose(length, temperature, generator)
            if temperature:
                tops.append(q.float().max(dim=-1).values.tolist())
            else:  # greedy: the softmax's tops along the proposals (their rows are one-hot)
                tops.append(confidences(draft, window[: position + 1] + proposals[:-1], 0.0)[position:])
            draft.commit(0, [window[position + 1]])
        rollouts.append(tops)
    return rollouts


def confidences(draft: Draft, tokens: list[int], temperature: float, q: torch.Tensor | None = None) -> list[float]:
    """The draft's top probability after each prefix of ``tokens``, as its confidence schedule
    reads it (runner.decoding.accept_rule.top_probability): of ``q``, its distributions at this
    temperature, when sampling; of its softmax when greedy."""
    if temperature == 0.0 or q is None:
        q = draft.distributions(tokens, temperature or 1.0)
    return q.float().max(dim=-1).values.tolist()


@dataclass(frozen=True)
class Prediction:
    chars_per_pass: float
    mean_draft_length: float
    # Proposals plus the draft call a confidence stop computes and drops (runner.decoding.speculative).
    mean_draft_calls: float
    acceptance_at_position: list[float]  # 1..schedule.longest
    draft_length_share: list[float]  # share of passes drafting 1..schedule.longest


def kept_proposals(draws: random.Random, acceptance: Sequence[float], position: int, drafted: int) -> int:
    """How many of ``drafted`` proposals from ``position`` a pass keeps: each with the chance at
    its position (``acceptance``: a_t, or the chance given the text's character), until the first
    rejected."""
    kept = 0
    while kept < drafted and draws.random() < acceptance[position + kept]:
        kept += 1
    return kept


def simulate(calibration: Calibration, schedule: Schedule, seed: int, repeats: int = SIMULATION_REPEATS) -> Prediction:
    """The schedule run over the calibration windows, each proposal kept with its chance given the
    text's character at its position (``kept_given_text``; a_t where the calibration has none)."""
    draws = random.Random(seed)
    accepted_per_pass: list[int] = []
    drafted_per_pass: list[int] = []
    chars = calls = 0
    for _ in range(repeats):
        for index, (kept_chance, tops) in enumerate(zip(calibration.kept_chances, calibration.draft_top, strict=True)):
            rollouts = calibration.rollout_tops[index] if calibration.rollout_tops is not None else None
            position, length = 0, schedule.first
            # A pass starting here must have room for its longest draft: stop short of the end.
            while position + schedule.longest < len(kept_chance):
                # How many of the proposals the pass would keep if it drafted them all.
                keeps = kept_proposals(draws, kept_chance, position, length)
                drafted = length
                if schedule.kind == "confidence":
                    drafted = 1
                    while drafted < length and stop_reading(tops, rollouts, position, keeps, drafted) >= schedule.p_min:
                        drafted += 1
                accepted = min(keeps, drafted)
                accepted_per_pass.append(accepted)
                drafted_per_pass.append(drafted)
                calls += drafted + (drafted < length)
                chars += accepted + 1
                position += accepted + 1
                length = schedule.next_length(length, drafted, accepted)
    passes = len(accepted_per_pass)
    if passes == 0:
        raise ValueError("the calibration windows are shorter than one pass")
    lengths = [
        sum(drafted == length for drafted in drafted_per_pass) / passes for length in range(1, schedule.longest + 1)
    ]
    return Prediction(
        chars_per_pass=chars / passes,
        mean_draft_length=sum(drafted_per_pass) / passes,
        mean_draft_calls=calls / passes,
        acceptance_at_position=acceptance_at_positions(accepted_per_pass, drafted_per_pass, schedule.longest),
        draft_length_share=lengths,
    )


def stop_reading(
    tops: Sequence[float], rollouts: Sequence[Sequence[float]] | None, position: int, keeps: int, proposed: int
) -> float:
    """The top probability the confidence schedule reads before proposal ``proposed`` + 1 of a
    pass from ``position`` that keeps ``keeps`` of its proposals: while every proposal so far is
    kept they are the text's characters, so the draft's top along the text; past the first
    rejected one the draft follows its own proposals, so the top of its own rollout from there
    (along the text where no rollout was made)."""
    if proposed <= keeps or rollouts is None or position + keeps >= len(rollouts):
        return tops[position + proposed]
    return rollouts[position + keeps][proposed - keeps]


def simulated_passes(
    acceptance: Sequence[float], start: int, k: int, seed: int, count: int
) -> list[tuple[int, int, int]]:
    """``count`` passes of k proposals along one calibration window from ``start``, each keeping
    its proposals with the chances at their positions (seeded draws), as (kept, begin, end): the
    passes a cost session replays, so that a draft turn follows as many characters per commit as
    the loop's would."""
    draws = random.Random(seed)
    passes: list[tuple[int, int, int]] = []
    position = start
    while len(passes) < count and position + k < len(acceptance):
        kept = kept_proposals(draws, acceptance, position, k)
        passes.append((kept, position, position + kept + 1))
        position += kept + 1
    return passes
