"""Small parts several test modules build the same way: a peaked untrained target model for the
speculative tests and an experiment context around it, a quick counting job for the queue tests,
and a job's model stored ahead of its workers."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

import torch

from runner.model.gpt import CharGPT, ModelConfig
from runner.spec.sweeps import validate
from store.records import ModelRecord
from store.store import Store

if TYPE_CHECKING:
    from runner.experiments.base import ExperimentContext

# The speculative tests' vocabulary: small enough for exact distributions.
VOCAB = 12


def peaked_target() -> CharGPT:
    """A seeded 2-block model whose weights are scaled up: peaked, trained-looking distributions."""
    torch.manual_seed(0)
    model = CharGPT(ModelConfig(vocab_size=VOCAB, d_model=32, n_layer=2, n_head=4, context_length=128))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(4.0)
    return model.eval()


def peaked_context(characters: int = 400, seed: int = 7) -> ExperimentContext:
    """An experiment context on the CPU around ``peaked_target``, its corpus ``characters`` long
    over VOCAB letters, without a stored model."""
    from runner.experiments.base import ExperimentContext
    from runner.measure.timing import Harness
    from runner.model.corpus import Corpus

    text = "".join(chr(ord("a") + index % VOCAB) for index in range(characters))
    return ExperimentContext(
        model=peaked_target(),
        model_record=None,
        corpus=Corpus(text, "test"),
        harness=Harness("cpu", warmup=1),
        device="cpu",
        seed=seed,
    )


def counting_job(name: str, index: int) -> dict[str, Any]:
    """A job of three quick cases (a counting sweep on a model trained for three steps); ``index``
    makes each job's cases its own."""
    return validate(
        {
            "name": f"{name}-{index}",
            "threads": 1,  # as tests/fixtures/slow.toml says: two threads crawl on a busy machine
            "model": {"d_model": 16, "n_layer": 1, "n_head": 2, "context_length": 32},
            "train": {"steps": 3, "batch_size": 4, "sequence_length": 16},
            "experiments": {
                "context_cost": {
                    "lengths": [8 + index, 100 + index],
                    "d_model": 8,
                    "d_ff": 16,
                    "n_heads": 2,
                    "reference_length": 16,
                }
            },
        }
    ).raw


@functools.cache
def _trained_model(spec_json: str) -> ModelRecord:
    from runner.model.corpus import load_corpus
    from runner.model.train import make_record, train

    spec = validate(json.loads(spec_json))
    corpus = load_corpus(spec.corpus, min_length=2 * spec.raw["model"]["context_length"])
    model, train_loss, val_loss = train(
        spec.model_config(len(corpus.vocabulary)), spec.train_config(), corpus, show_progress=False
    )
    return make_record(model, spec.train_config(), corpus, train_loss, val_loss)


def store_model_of(store: Store, raw_spec: dict[str, Any]) -> None:
    """Save the model ``raw_spec`` trains into ``store``, as an earlier run would have left it, so
    its workers load it instead of training it. For tests about workers and jobs, not training:
    a worker that trains also imports torch's compiler (the optimizer pulls it in), some 2 s of CPU
    per process on the test machine; here it is trained once per test process."""
    store.results.save_model(_trained_model(json.dumps(raw_spec, sort_keys=True)))


@functools.cache
def _quick_roof() -> dict[str, Any]:
    from runner.cost import machine_profile

    return machine_profile.profile(quick=True)


def store_roof_of(store: Store, *machine_names: str) -> None:
    """Save this host's quick roof under each machine name (DECODELAB_MACHINE) in ``store``, as
    each machine's first run would have left it, so its workers do not profile first (about 1.3 s
    each on the test machine, half of it CPU); profiled once per test process. A stored profile
    counts for a machine of the same name and CPU model whatever its threads (store.profiles)."""
    import dataclasses

    from runner.measure.machine import fingerprint

    roof = _quick_roof()
    here = fingerprint("cpu")
    for name in machine_names:
        machine_id = store.results.machine_id(dataclasses.replace(here, name=name))
        store.profiles.save(machine_id, roof["instruction_set"], True, roof)
