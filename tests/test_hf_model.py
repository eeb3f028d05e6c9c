"""Local Hugging Face GPT-2 checkpoints (runner.model.hf_checkpoint, runner.spec.hf, runner.execution.hf_run,
runner.experiments.parts.hf_peer) on real directories built by tests/hf_checkpoints.py: the weights map exactly,
an hf spec runs end to end through `decodelab run`, and every bad directory ends in one line."""

from __future__ import annotations

import json
import random
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from dashboard import pages as dashboard_pages
from runner.errors import InputError
from store import frames
from store.store import Store
from tests.conftest import ROOT, hf_spec_text, run_decodelab
from tests.hf_checkpoints import copy_with

pytest.importorskip("transformers")


def test_the_weights_map_onto_decodelab_exactly(hf_checkpoints: Any) -> None:
    """Logits of the mapped CharGPT equal transformers' own for the same directory, and the
    shape, parameter count and name come from config.json."""
    import transformers

    from runner.model.hf_checkpoint import load_model, load_tokenizer, read_checkpoint

    checkpoint = read_checkpoint(str(hf_checkpoints.random))
    model = load_model(checkpoint)
    reference = transformers.GPT2LMHeadModel.from_pretrained(hf_checkpoints.random, local_files_only=True).eval()
    tokens = torch.tensor([load_tokenizer(checkpoint).encode("Return the value of the attribute.").ids])
    with torch.inference_mode():
        difference = (model(tokens) - reference(tokens).logits).abs().max().item()
    assert difference < 1e-5
    # Greedy text through the compiled path is transformers' own generate's, on text varied
    # enough (random weights) for the comparison to mean something.
    from runner.decoding.decode import generate
    from runner.experiments.parts.hf_peer import hf_generate

    prompt = tokens[0, :4].tolist()
    ours = generate(model, prompt, 24, temperature=0.0, impl="fast").tokens
    assert hf_generate(reference, prompt, 24) == ours and len(set(ours)) > 3
    assert checkpoint.name == "tiny-random"
    assert model.parameter_count() == checkpoint.parameter_count() == reference.num_parameters()
    assert checkpoint.shape == {"d_model": 32, "n_layer": 2, "n_head": 2, "context_length": 96, "vocab_size": 320}


def as_pickled_bin(source: Path, destination: Path, drop: str = "") -> Path:
    """A copy whose weights are a zip-format ``pytorch_model.bin`` (the safetensors' tensors, less
    any whose name holds ``drop``), as older GPT-2 directories ship them."""
    from safetensors.torch import load_file

    state = load_file(str(source / "model.safetensors"))
    copy = without_weights(source, destination)
    kept = {name: tensor for name, tensor in state.items() if not drop or drop not in name}
    torch.save(kept, copy / "pytorch_model.bin")
    return copy


def test_a_pickled_bin_loads_as_its_safetensors_do_and_is_checked_before_a_run(
    hf_checkpoints: Any, tmp_path: Path
) -> None:
    from runner.model.hf_checkpoint import check_weights, load_model, read_checkpoint

    safetensors = read_checkpoint(str(hf_checkpoints.random))
    pickled = read_checkpoint(str(as_pickled_bin(hf_checkpoints.random, tmp_path / "bin")))
    check_weights(pickled)
    reference, model = load_model(safetensors), load_model(pickled)
    for name, tensor in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    lacking = read_checkpoint(str(as_pickled_bin(hf_checkpoints.random, tmp_path / "lacking", drop=".h.1.")))
    with pytest.raises(InputError, match="lack 'h.1.ln_1.weight'"):
        check_weights(lacking)


def measurements(url: str) -> pd.DataFrame:
    store = Store(url)
    try:
        run_id = int(frames.runs(store)["run_id"].iloc[0])
        frame = frames.measurements(store, run_id)
    finally:
        store.close()
    frame["part"] = [params.get("part") for params in frame["params"]]
    frame["draft"] = [params.get("draft") for params in frame["params"]]
    return frame


def values(frame: pd.DataFrame, metric: str, **where: Any) -> list[float]:
    chosen = frame[frame["metric"] == metric]
    for column, wanted in where.items():
        chosen = chosen[chosen[column] == wanted]
    return chosen["value"].tolist()


@pytest.mark.slow
def test_an_hf_spec_runs_end_to_end_through_decodelab_run(hf_run_url: str, hf_checkpoints: Any) -> None:
    from runner.cost import counts
    from runner.model.hf_checkpoint import content_hash

    frame = measurements(hf_run_url)
    # The model hash is the directory's content hash; its record keeps config and vocabulary.
    store = Store(hf_run_url)
    try:
        run = frames.runs(store).iloc[0]
        record = store.results.find_model(weights_hash=run["model_hash"])
    finally:
        store.close()
    assert run["status"] == "done"
    assert run["model_hash"] == content_hash(hf_checkpoints.target)
    assert record is not None and record.weights == b""
    assert record.config["name"] == "tiny-target" and record.config["tokenizer_vocab_size"] == 320
    assert record.config["hf_config"]["n_embd"] == 32 and record.parameter_count == 38_784
    # The cache is exact through every impl and agrees with transformers' own cache.
    assert values(frame, "greedy_identical", part="equivalence") == [1.0, 1.0]
    assert values(frame, "strings_identical", part="equivalence") == [1.0, 1.0]
    assert values(frame, "transformers_tokens_identical") == [1.0] * 4
    assert len(values(frame, "speedup_vs_transformers_cache")) == 4
    # Exact counts from the config's shape (d 32, 2 blocks, vocab 320).
    assert values(frame, "mults_cache", part="counts") == [
        counts.generation_mults(n, 32, 2, cache=True) for n in (8, 16)
    ]
    # Quantization on the spec's text: each of its three variants reports its loss increase.
    assert len(values(frame, "loss_increase")) == 3
    # Speculative: the hf draft is accepted sometimes, not always; HF assisted generation is the
    # peer, its greedy text the same as decodelab's.
    acceptance = values(frame, "acceptance_rate", draft=f"hf:{hf_checkpoints.draft}")
    assert len(acceptance) == 1 and 0.0 < acceptance[0] < 1.0
    assert values(frame, "hf_assisted_greedy_identical") == [1.0]
    assert len(values(frame, "speedup_vs_hf_assisted")) == 1
    assert values(frame, "distribution_check_passes", part="distribution") == [1.0, 1.0, 1.0]
    ngram = values(frame, "acceptance_rate", draft="ngram")
    assert len(ngram) == 1 and 0.0 < ngram[0] < 1.0


def write_spec(directory: Path, target: Path, draft: Path, **changes: Any) -> Path:
    spec = directory / "spec.toml"
    text = hf_spec_text(target, draft)
    for old, new in changes.items():
        text = text.replace(old, new)
    spec.write_text(text)
    return spec


def without_block(source: Path, destination: Path) -> Path:
    """A copy whose safetensors lack the second block's weights."""
    from safetensors.torch import load_file, save_file

    copy = copy_with(source, destination)
    state = load_file(str(source / "model.safetensors"))
    save_file({name: tensor for name, tensor in state.items() if ".h.1." not in name}, str(copy / "model.safetensors"))
    return copy


def truncated(source: Path, destination: Path) -> Path:
    copy = copy_with(source, destination)
    data = (source / "model.safetensors").read_bytes()
    (copy / "model.safetensors").write_bytes(data[: len(data) // 2])
    return copy


def damaged_pickle(source: Path, destination: Path) -> Path:
    """A copy whose only weights are a ``pytorch_model.bin`` of damaged bytes that open like a
    protocol-1 pickle: torch warns about the protocol before it fails."""
    copy = without_weights(source, destination)
    (copy / "pytorch_model.bin").write_bytes(b"\x80\x01" + random.Random(0).randbytes(4096))
    return copy


def without_weights(source: Path, destination: Path) -> Path:
    copy = copy_with(source, destination)
    (copy / "model.safetensors").unlink()
    return copy


BAD_DIRECTORIES = {
    "llama": (
        lambda source, destination: copy_with(
            source, destination, model_type="llama", architectures=["LlamaForCausalLM"]
        ),
        "model.path",
        "holds a 'llama' model (LlamaForCausalLM)",
    ),
    "no_weights": (without_weights, "model.path", "has no weights"),
    "missing_block": (without_block, "model.path", "lack 'h.1.ln_1.weight'"),
    "corrupt": (truncated, "model.path", "as safetensors"),
    "corrupt_pickle": (damaged_pickle, "model.path", "cannot read"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD_DIRECTORIES))
def test_a_bad_directory_ends_in_one_line(case: str, hf_checkpoints: Any, tmp_path: Path) -> None:
    damage, field, fragment = BAD_DIRECTORIES[case]
    target = damage(hf_checkpoints.target, tmp_path / case)
    spec = write_spec(tmp_path, target, hf_checkpoints.draft)
    database = tmp_path / "store.db"
    result = run_decodelab("run", "--spec", str(spec), "--db", f"sqlite:///{database}", cwd=ROOT)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {field}: ") and fragment in lines[0], lines[0]
    assert not database.exists(), "a refused spec writes nothing"


@pytest.mark.slow
def test_a_draft_with_another_tokenizer_is_refused_in_one_line(hf_checkpoints: Any, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, hf_checkpoints.target, hf_checkpoints.other_tokenizer)
    result = run_decodelab("run", "--spec", str(spec), "--db", f"sqlite:///{tmp_path / 'store.db'}", cwd=ROOT)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: experiments.speculative.drafts[2]: the tokenizer of") and "differs" in lines[0]


def hf_raw(hf_checkpoints: Any) -> dict[str, Any]:
    return tomllib.loads(hf_spec_text(hf_checkpoints.target, hf_checkpoints.draft))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"train": {"steps": 10}}, "train.steps: an hf model is not trained here"),
        ({"model": {"d_model": 64}}, "model.d_model: 64 differs from the checkpoint's 32"),
        ({"speculative": {"drafts": ["small"]}}, "experiments.speculative.drafts[0]: 'small' trains a draft"),
        (
            {"speculative": {"drafts": ["ngram", "distilled_ngram"]}},
            "experiments.speculative.drafts[1]: 'distilled_ngram' trains a draft",
        ),
        ({"model": {"source": "gguf"}}, "model.source: 'gguf' is not a known value"),
    ],
)
def test_what_an_hf_spec_may_not_say(hf_checkpoints: Any, change: dict[str, Any], message: str) -> None:
    from runner.spec.sweeps import validate

    raw = hf_raw(hf_checkpoints)
    if "train" in change:
        raw["train"] = change["train"]
    if "model" in change:
        raw["model"] = {**raw["model"], **change["model"]}
    if "speculative" in change:
        raw["experiments"]["speculative"] = {**raw["experiments"]["speculative"], **change["speculative"]}
    with pytest.raises(InputError) as refused:
        validate(raw)
    assert str(refused.value).startswith(message), str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_validated_hf_spec_validates_again_unchanged(hf_checkpoints: Any) -> None:
    """The stored spec carries the checkpoint's shape: a worker validating it again gets it back."""
    from runner.spec.sweeps import validate

    first = validate(hf_raw(hf_checkpoints))
    assert first.raw["model"]["name"] == "tiny-target" and first.raw["model"]["context_length"] == 96
    assert validate(json.loads(json.dumps(first.raw))).raw == first.raw
    with pytest.raises(ValueError, match="not trained here"):
        first.train_config()


def test_an_hf_draft_needs_an_hf_target(hf_checkpoints: Any) -> None:
    from runner.spec.sweeps import validate

    raw = tomllib.loads((ROOT / "tests" / "fixtures" / "tiny.toml").read_text())
    raw["experiments"]["speculative"]["drafts"] = ["ngram", f"hf:{hf_checkpoints.draft}"]
    with pytest.raises(InputError, match=r"^experiments.speculative.drafts\[1\]: an hf: draft needs an hf target"):
        validate(raw)


GPT2_SHAPE = {"d_model": 768, "n_layer": 12, "n_head": 12, "context_length": 1024, "vocab_size": 50257}


def gpt2_sized(experiments: dict[str, Any]) -> Any:
    """Experiments checked as the validator checks them, on gpt2's shape (no 500 MB checkpoint
    is built for this: the estimate needs the shape only)."""
    from runner.experiments import registry
    from runner.fields import check_section
    from runner.spec import hf as hf_spec
    from runner.spec.sweeps import SweepSpec

    model = {"source": "hf", "path": "gpt2", "corpus": "default", "name": "gpt2", **GPT2_SHAPE}
    known = registry()
    checked = {
        name: check_section(name, params, known[name].fields, model)
        for name, params in hf_spec.prepare_experiments(experiments).items()
    }
    return SweepSpec({"name": "gpt2", "device": "cpu", "seed": 1, "threads": 0, "model": model, "experiments": checked})


def test_the_example_fits_a_two_core_machine_and_a_seed_sized_sweep_is_refused() -> None:
    from runner.spec import hf as hf_spec
    from runner.spec.calibrated_estimate import estimate
    from runner.spec.sweeps import preset_text

    eight_gib = 8 * 2**30
    example = gpt2_sized(tomllib.loads((ROOT / "examples" / "gpt2-distilgpt2.toml").read_text())["experiments"])
    fits = hf_spec.check_affordable(example, memory_bytes=eight_gib)
    assert 3600 < fits.seconds < 3 * 3600 and fits.peak_bytes < 2 * 2**30
    # The launch form's and `decodelab run`'s estimate is the checkpoint's own.
    assert estimate(example, {}, model_stored=False).seconds == fits.seconds
    seed = tomllib.loads(preset_text("seed"))["experiments"]
    with pytest.raises(InputError) as refused:
        hf_spec.check_affordable(gpt2_sized(seed), memory_bytes=eight_gib)
    assert str(refused.value).startswith("experiments: gpt2 with these experiments needs about")
    # Without the dense-table drafts the seed sizes still take days: refused for their time.
    seed["speculative"]["drafts"] = ["int8", "fast_int8"]
    with pytest.raises(InputError) as refused:
        hf_spec.check_affordable(gpt2_sized(seed), memory_bytes=eight_gib)
    assert str(refused.value).startswith("experiments: gpt2 with these experiments takes about")
    assert "\n" not in str(refused.value)


def all_text(app: Any) -> str:
    parts = [element.value for kind in ("title", "subheader", "caption", "markdown") for element in app.get(kind)]
    parts += [str(element.proto.spec) for element in app.get("vega_lite_chart")]
    parts += [str(option) for box in app.selectbox for option in box.options]
    return "\n".join(parts)


@pytest.mark.parametrize("page", [page.name for page in dashboard_pages.pages()])
def test_the_dashboard_shows_an_hf_run_like_any_other(
    page: str, hf_run_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("DECODELAB_DB", hf_run_url)
    app = AppTest.from_file(str(ROOT / "dashboard" / "views" / f"{page}.py"), default_timeout=60)
    app.run()
    assert not app.exception, [exception.value for exception in app.exception]
    assert not app.error, [error.value for error in app.error]
    text = all_text(app)
    if page in ("kv_cache", "quantization", "speculative"):
        assert "tiny-target" in text, "the run picker names the model from its config"
    if page == "kv_cache":
        assert "Against transformers' own cache" in text
    if page == "speculative":
        assert "tokens per target pass" in text and "characters per target pass" not in text
        assert "Against Hugging Face assisted generation" in text and "the tokens emitted at every position" in text
    if page == "quantization":
        assert "first generated token" in text


def test_runs_name_their_model_and_its_unit(hf_run_url: str, filled_store_url: str) -> None:
    for url, model, unit in ((hf_run_url, "tiny-target", "tokens"), (filled_store_url, "char d32×1", "characters")):
        store = Store(url)
        try:
            run = frames.runs(store).iloc[0]
        finally:
            store.close()
        assert (run["model"], run["text_unit"]) == (model, unit)


def test_the_dashboard_form_launches_an_hf_spec(hf_checkpoints: Any, sqlite_url: str) -> None:
    from dashboard.launch import LaunchRequest, launch

    store = Store(sqlite_url)
    try:
        text = hf_spec_text(hf_checkpoints.target, hf_checkpoints.draft)
        # The checkpoints' folder as the data folder: a launch's models must be in it.
        data_dir = hf_checkpoints.target.parent
        launched = launch(store, LaunchRequest("spec", "quick", [], text, "", True), data_dir)
        job = frames.jobs(store).iloc[0]
    finally:
        store.close()
    assert launched.job_id == job["job_id"] and launched.estimated_seconds > 0


def test_loading_and_the_peers_never_open_a_connection(hf_checkpoints: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything an hf run does with a directory works with every socket connection refused."""
    import socket

    from runner.experiments.parts.hf_peer import hf_generate, peer_of
    from runner.model.hf_checkpoint import check_weights, content_hash, load_model, load_tokenizer, read_checkpoint

    def refuse(*_: object) -> None:
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    target, draft = read_checkpoint(str(hf_checkpoints.target)), read_checkpoint(str(hf_checkpoints.draft))
    check_weights(target)
    load_tokenizer(target)
    assert len(content_hash(target.path)) == 64
    target_model, draft_model = load_model(target), load_model(draft)
    assert len(hf_generate(peer_of(target_model), [1, 2, 3], 5, assistant=peer_of(draft_model))) == 5
