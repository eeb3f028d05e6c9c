"""Hugging Face's own decoding as the peer of an hf run: the same weights in
``transformers.GPT2LMHeadModel`` (runner.model.gpt.to_transformers), generating with transformers'
own KV cache, and assisted generation (``generate(assistant_model=...)``, its default schedule)
beside decodelab's speculative loop. Only hf runs time these; transformers is imported here only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from runner.experiments.base import ExperimentContext
from runner.measure.timing import Paired
from runner.model.gpt import CharGPT
from runner.model.hf_checkpoint import TokenCorpus
from store.records import MeasurementRecord

# transformers models built from decodelab models, by the decodelab model's id; the model is
# kept beside its peer so that the id is not reused while the entry stands.
_PEERS: dict[int, tuple[CharGPT, Any]] = {}
MAX_PEERS = 4


def is_hf_run(context: ExperimentContext) -> bool:
    return isinstance(context.corpus, TokenCorpus)


def peer_of(model: CharGPT) -> Any:
    """``model``'s weights in a ``GPT2LMHeadModel`` on its device (built once per model)."""
    from runner.model.gpt import to_transformers

    entry = _PEERS.get(id(model))
    if entry is None or entry[0] is not model:
        if len(_PEERS) >= MAX_PEERS:
            _PEERS.clear()
        entry = (model, to_transformers(model).to(model.device).eval())
        _PEERS[id(model)] = entry
    return entry[1]


@torch.inference_mode()
def hf_generate(
    peer: Any, prompt: list[int], new_tokens: int, temperature: float = 0.0, seed: int = 0, assistant: Any = None
) -> list[int]:
    """``new_tokens`` tokens after ``prompt`` through transformers' ``generate`` with its own
    cache: greedy at temperature 0, else sampled from the full softmax (no top-k, no top-p)."""
    import transformers

    input_ids = torch.tensor([prompt], device=peer.device)
    options: dict[str, Any] = {
        "max_new_tokens": new_tokens,
        "min_new_tokens": new_tokens,
        "use_cache": True,
        "pad_token_id": 0,
        "eos_token_id": None,
    }
    if temperature == 0.0:
        options["do_sample"] = False
    else:
        options.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        torch.manual_seed(seed)
    # One GenerationConfig, not keyword arguments beside the model's own (transformers warns);
    # its assisted path still warns about the arguments it passes itself: errors only, meanwhile.
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        output = peer.generate(
            input_ids,
            generation_config=transformers.GenerationConfig(**options),
            attention_mask=torch.ones_like(input_ids),
            assistant_model=assistant,
        )
    finally:
        transformers.logging.set_verbosity(verbosity)
    return [int(token) for token in output[0, len(prompt) :].tolist()]


def cache_column(
    model: CharGPT, prompt: list[int], n: int, our_greedy: list[int]
) -> tuple[Callable[[], object], Callable[[list[float], list[float]], list[MeasurementRecord]]]:
    """transformers' cached greedy generation as one more side of a KV-cache timing, and what
    to record from its rounds against decodelab's cached rounds (same rounds, same machine)."""
    peer = peer_of(model)
    identical = hf_generate(peer, prompt, n) == our_greedy

    def side() -> object:
        return hf_generate(peer, prompt, n)

    def measurements(transformers_seconds: list[float], cache_seconds: list[float]) -> list[MeasurementRecord]:
        paired = Paired(tuple(transformers_seconds), tuple(cache_seconds))
        return [
            MeasurementRecord("seconds_transformers_cache", min(transformers_seconds), "seconds"),
            MeasurementRecord("transformers_tokens_identical", identical, "bool"),
            *paired.measurements("speedup_vs_transformers_cache"),
        ]

    return side, measurements


def assisted_measurements(
    target: CharGPT,
    draft: CharGPT,
    prompt: list[int],
    new_tokens: int,
    temperature: float,
    seed: int,
    our_greedy: list[int],
    speculative: Callable[[], object],
    context: ExperimentContext,
    pairs: int,
) -> list[MeasurementRecord]:
    """Hugging Face assisted generation with the same target, draft, prompt and token count,
    its default schedule, paired against decodelab's speculative loop at the case's temperature
    (``speedup_vs_hf_assisted`` > 1: decodelab is faster), and its greedy text against ours."""
    target_peer, draft_peer = peer_of(target), peer_of(draft)
    greedy = hf_generate(target_peer, prompt, new_tokens, assistant=draft_peer)

    def assisted() -> object:
        return hf_generate(target_peer, prompt, new_tokens, temperature, seed, assistant=draft_peer)

    paired = context.harness.paired(assisted, speculative, pairs=pairs)
    return [
        MeasurementRecord("hf_assisted_seconds", min(paired.baseline_seconds), "seconds"),
        MeasurementRecord("hf_assisted_greedy_identical", greedy == our_greedy, "bool"),
        *paired.measurements("speedup_vs_hf_assisted"),
    ]
