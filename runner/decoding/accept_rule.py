"""The speculative accept rule on one position, and what it reads: the target's and the draft's
sampling distributions. Accepting proposal x with probability min(1, p(x)/q(x)) and otherwise
drawing from normalize(max(0, p − q)) emits exactly p, whatever the draft (Leviathan et al.,
Chen et al.). Deliberately broken variants (``RULE_VARIANTS``) run beside it so that the
distribution check can show it catches them; the C++ verification (runner/decoding/csrc/sampling.h)
implements the same rule and variants, numbered in this order.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

# The accept rule, then the bug variants the distribution check must catch (the order is the C++
# side's variant number, runner/decoding/csrc/sampling.h).
RULE_VARIANTS = ("correct", "accept_all", "inverted_ratio", "residual_unnormalised", "bonus_from_draft")


def probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The sampling distribution at this temperature; temperature 0 is the one-hot argmax,
    which turns the accept rule below into "accept iff the draft matches the target's argmax"."""
    if temperature == 0.0:
        return F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)
    return torch.softmax(logits / temperature, dim=-1)


def top_probability(logits: torch.Tensor, distribution: torch.Tensor, temperature: float) -> torch.Tensor:
    """What the confidence schedule reads: the top probability of ``distribution``, the draft's
    sampling distribution drawn from ``logits`` at this temperature; greedy, of the logits' softmax
    (the one-hot would always read 1, and the engines read the draft's softmax)."""
    return (distribution if temperature else torch.softmax(logits, dim=-1)).max(dim=-1).values


def accept_rule(
    p: list[float], q: list[float], proposal: int, uniform: float, draw: float, variant: str = "correct"
) -> tuple[bool, int]:
    """The speculative rule at one position, on plain lists (k is small; tensor ops would cost
    more in dispatch than the arithmetic).

    Accept proposal x with probability min(1, p(x)/q(x)); otherwise emit the token at which the
    cumulative normalize(max(0, p − q)) first exceeds ``draw`` (a uniform in [0, 1)). Together
    the two branches emit exactly p. With one-hot p and q (greedy) it accepts exactly when the
    draft matches the target's argmax, and otherwise emits that argmax.

    The bug variants (controls for the distribution check): ``accept_all`` keeps every proposal,
    ``inverted_ratio`` keeps with min(1, q/p), ``residual_unnormalised`` compares the residual's
    cumulative sum with ``draw`` itself instead of ``draw`` × its total.
    """
    if variant == "accept_all":
        return True, proposal
    if variant == "inverted_ratio":
        if uniform * p[proposal] < q[proposal]:
            return True, proposal
    elif uniform * q[proposal] < p[proposal]:  # u < p/q without dividing by a zero q
        return True, proposal
    residual = [max(0.0, a - b) for a, b in zip(p, q, strict=True)]
    if sum(residual) <= 0.0:  # p == q: nothing to correct towards (unreachable: p/q would be 1)
        residual = p
    if variant == "residual_unnormalised":
        return False, sample_index(residual, draw / sum(residual))
    return False, sample_index(residual, draw)


def argmax(weights: list[float]) -> int:
    return max(range(len(weights)), key=weights.__getitem__)


def sample_index(weights: list[float], draw: float) -> int:
    """The index where the cumulative weights first exceed ``draw`` × their total."""
    threshold, running = draw * sum(weights), 0.0
    for index, weight in enumerate(weights):
        running += weight
        if weight > 0.0 and running > threshold:
            return index
    return argmax(weights)  # rounding (or a buggy draw above 1) left the threshold unreached
