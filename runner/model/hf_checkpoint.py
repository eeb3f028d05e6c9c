"""Local Hugging Face GPT-2-family checkpoints as decodelab models (``[model] source = "hf"``).

A checkpoint is a directory in Hugging Face's format: ``config.json``, weights
(``model.safetensors``, its sharded index, or ``pytorch_model.bin``) and a byte-level BPE
tokenizer (``tokenizer.json``, or ``vocab.json`` + ``merges.txt``). Its weights are mapped into
decodelab's own ``CharGPT`` (the same architecture: learned positions, pre-LayerNorm, fused
q/k/v with biases, tanh GELU, tied lm head), so every impl (naive, static, fast) and every
experiment runs on it unchanged, one token per BPE token instead of per character.

Nothing here reaches a network: files are read from the directory only, and transformers is
imported only where its own ``generate`` is the peer being timed (runner.experiments.parts.hf_peer).
"""

from __future__ import annotations

import functools
import hashlib
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from runner.errors import InputError
from runner.model.corpus import Corpus
from runner.model.gpt import CharGPT, ModelConfig
from runner.model.torch_files import UnreadableCheckpoint, load_weights_only

HF_SOURCE = "hf"
# What config.json must say (GPT-2's own values), or what CharGPT computes differently.
GPT2_MODEL_TYPES = ("gpt2",)
GPT2_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")  # both are the tanh approximation
REQUIRED_SETTINGS: dict[str, Any] = {
    "layer_norm_epsilon": 1e-5,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


@dataclass(frozen=True)
class Checkpoint:
    """A checked directory: its config.json and the model shape decodelab reads from it."""

    path: Path
    config: dict[str, Any]

    @property
    def name(self) -> str:
        """What the dashboard calls it: the name it was saved under, else its directory's."""
        saved = str(self.config.get("_name_or_path") or "").rstrip("/")
        return Path(saved).name if saved else self.path.name

    @property
    def shape(self) -> dict[str, int]:
        return {
            "d_model": int(self.config["n_embd"]),
            "n_layer": int(self.config["n_layer"]),
            "n_head": int(self.config["n_head"]),
            "context_length": int(self.config["n_positions"]),
            "vocab_size": int(self.config["vocab_size"]),
        }

    def model_config(self) -> ModelConfig:
        shape = self.shape
        return ModelConfig(
            vocab_size=shape["vocab_size"],
            d_model=shape["d_model"],
            n_layer=shape["n_layer"],
            n_head=shape["n_head"],
            context_length=shape["context_length"],
        )

    def parameter_count(self) -> int:
        """Distinct parameters (the tied lm head once), from the shape alone."""
        shape = self.shape
        d, layers = shape["d_model"], shape["n_layer"]
        per_block = 12 * d * d + 13 * d  # q/k/v, projection, MLP (4d), their biases, two LayerNorms
        return (shape["vocab_size"] + shape["context_length"]) * d + layers * per_block + 2 * d


def read_checkpoint(path_text: str, field_name: str = "model.path") -> Checkpoint:
    """The directory's config, refused in one line unless it is a GPT-2-family checkpoint with
    weights and a tokenizer that decodelab can run exactly."""
    path = Path(path_text).expanduser()
    if not path.is_dir():
        raise InputError(f"{field_name}: {path_text!r} is not a directory (allowed: a Hugging Face model directory)")
    config_file = path / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(
            f"{field_name}: {path_text!r} has no config.json (allowed: a Hugging Face model directory)"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{field_name}: cannot read {str(config_file)!r} as JSON ({error})") from None
    if not isinstance(config, dict):
        raise InputError(f"{field_name}: {str(config_file)!r} is not a JSON object")
    model_type = config.get("model_type")
    if model_type not in GPT2_MODEL_TYPES:
        architectures = ", ".join(config.get("architectures") or []) or "no architecture"
        raise InputError(
            f"{field_name}: {path_text!r} holds a {model_type!r} model ({architectures}) "
            "(allowed: the GPT-2 family, model_type 'gpt2', e.g. gpt2, distilgpt2)"
        )
    _check_settings(config, path_text, field_name)
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        raise InputError(f"{field_name}: {path_text!r} has no weights (allowed: one of {', '.join(WEIGHT_FILES)})")
    if not (path / "tokenizer.json").is_file() and not (
        (path / "vocab.json").is_file() and (path / "merges.txt").is_file()
    ):
        raise InputError(
            f"{field_name}: {path_text!r} has no tokenizer (allowed: tokenizer.json, or vocab.json and merges.txt)"
        )
    return Checkpoint(path=path, config=config)


def _check_settings(config: dict[str, Any], path_text: str, field_name: str) -> None:
    for key in ("n_embd", "n_layer", "n_head", "n_positions", "vocab_size"):
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{field_name}: config.json of {path_text!r} has {key} = {value!r} (allowed: 1 or more)")
    if config["n_embd"] % config["n_head"]:
        raise InputError(f"{field_name}: config.json of {path_text!r} has n_head not dividing n_embd")
    activation = config.get("activation_function", "gelu_new")
    if activation not in GPT2_ACTIVATIONS:
        raise InputError(
            f"{field_name}: config.json of {path_text!r} has activation_function {activation!r} "
            f"(allowed: {', '.join(GPT2_ACTIVATIONS)}, GPT-2's tanh GELU)"
        )
    inner = config.get("n_inner")
    if inner not in (None, 4 * config["n_embd"]):
        raise InputError(f"{field_name}: config.json of {path_text!r} has n_inner {inner} (allowed: 4 × n_embd)")
    for key, wanted in REQUIRED_SETTINGS.items():
        found = config.get(key, wanted)
        if found != wanted:
            raise InputError(
                f"{field_name}: config.json of {path_text!r} has {key} = {found!r} (allowed: {wanted!r}, GPT-2's)"
            )


def content_hash(path: Path) -> str:
    """sha256 over every file's relative name and bytes, in name order: the model hash."""
    digest = hashlib.sha256()
    for file in sorted(item for item in path.rglob("*") if item.is_file() and not item.name.startswith(".")):
        digest.update(str(file.relative_to(path)).encode())
        digest.update(b"\0")
        with file.open("rb") as handle:
            for chunk in iter(functools.partial(handle.read, 1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def load_tokenizer(checkpoint: Checkpoint, field_name: str = "model.path") -> Any:
    """The directory's tokenizer through the ``tokenizers`` library (local files only)."""
    from tokenizers import Tokenizer
    from tokenizers.implementations import ByteLevelBPETokenizer

    path = checkpoint.path
    tokenizer: Any
    try:
        if (path / "tokenizer.json").is_file():
            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        else:
            tokenizer = ByteLevelBPETokenizer(str(path / "vocab.json"), str(path / "merges.txt"))
    except Exception as error:  # the library raises bare Exceptions for unreadable files
        raise InputError(f"{field_name}: cannot read the tokenizer of {str(path)!r} ({error})") from None
    size = tokenizer.get_vocab_size()
    if size > checkpoint.shape["vocab_size"]:
        raise InputError(
            f"{field_name}: the tokenizer of {str(path)!r} has {size} tokens, more than the model's vocab_size "
            f"{checkpoint.shape['vocab_size']}"
        )
    return tokenizer


def check_same_vocabulary(target: Checkpoint, draft: Checkpoint, field_name: str) -> None:
    """A draft must share the target's tokenizer: same token ids for the same strings."""
    if load_tokenizer(target).get_vocab() != load_tokenizer(draft, field_name).get_vocab():
        raise InputError(
            f"{field_name}: the tokenizer of {str(draft.path)!r} differs from the target's "
            f"(allowed: a draft sharing the target's vocabulary)"
        )
    if draft.shape["vocab_size"] != target.shape["vocab_size"]:
        raise InputError(
            f"{field_name}: vocab_size {draft.shape['vocab_size']} differs from the target's "
            f"{target.shape['vocab_size']} (allowed: the target's)"
        )


def _read_state(path: Path, field_name: str) -> dict[str, torch.Tensor]:
    """Every tensor of the directory's weights, by its saved name."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    def safetensors_file(file: Path) -> dict[str, torch.Tensor]:
        try:
            return load_file(str(file))
        except (SafetensorError, OSError) as error:
            raise InputError(f"{field_name}: cannot read {str(file)!r} as safetensors ({error})") from None

    if (path / "model.safetensors").is_file():
        return safetensors_file(path / "model.safetensors")
    if (path / "model.safetensors.index.json").is_file():
        try:
            index = json.loads((path / "model.safetensors.index.json").read_text(encoding="utf-8"))
            shards = sorted(set(index["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise InputError(f"{field_name}: cannot read the safetensors index of {str(path)!r} ({error})") from None
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(safetensors_file(path / shard))
        return state
    return _read_pickled_state(path / "pytorch_model.bin", field_name)


def _read_pickled_state(file: Path, field_name: str, mmap: bool = False) -> dict[str, torch.Tensor]:
    """A ``pytorch_model.bin``'s state dict; ``mmap`` maps a zip-format file rather than reading it."""
    try:
        loaded = load_weights_only(file, mmap=mmap and zipfile.is_zipfile(file))
    except UnreadableCheckpoint as error:
        raise InputError(f"{field_name}: cannot read {str(file)!r} ({error.reason})") from None
    if not isinstance(loaded, dict) or not all(isinstance(tensor, torch.Tensor) for tensor in loaded.values()):
        raise InputError(f"{field_name}: {str(file)!r} is not a state dict")
    return loaded


def to_decodelab_state(state: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    """GPT-2's names (with or without the ``transformer.`` prefix; Conv1D weights are (in, out))
    under CharGPT's names; ``lm_head.weight`` is the tied embedding."""
    plain = {name.removeprefix("transformer."): tensor for name, tensor in state.items()}
    mapped = {
        "wte.weight": plain["wte.weight"],
        "wpe.weight": plain["wpe.weight"],
        "ln_f.weight": plain["ln_f.weight"],
        "ln_f.bias": plain["ln_f.bias"],
        "lm_head.weight": plain["wte.weight"],
    }
    for index in range(n_layer):
        theirs, ours = f"h.{index}.", f"blocks.{index}."
        for norm in ("ln_1", "ln_2"):
            for kind in ("weight", "bias"):
                mapped[f"{ours}{norm}.{kind}"] = plain[f"{theirs}{norm}.{kind}"]
        for name in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            mapped[f"{ours}{name}.weight"] = plain[f"{theirs}{name}.weight"].t()
            mapped[f"{ours}{name}.bias"] = plain[f"{theirs}{name}.bias"]
    return mapped


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """GPT-2's weight names (no prefix) and the shape config.json implies for each."""
    d, vocab = config.d_model, config.vocab_size
    shapes: dict[str, tuple[int, ...]] = {
        "wte.weight": (vocab, d),
        "wpe.weight": (config.context_length, d),
        "ln_f.weight": (d,),
        "ln_f.bias": (d,),
    }
    for index in range(config.n_layer):
        block = {
            "ln_1.weight": (d,),
            "ln_1.bias": (d,),
            "attn.c_attn.weight": (d, 3 * d),
            "attn.c_attn.bias": (3 * d,),
            "attn.c_proj.weight": (d, d),
            "attn.c_proj.bias": (d,),
            "ln_2.weight": (d,),
            "ln_2.bias": (d,),
            "mlp.c_fc.weight": (d, 4 * d),
            "mlp.c_fc.bias": (4 * d,),
            "mlp.c_proj.weight": (4 * d, d),
            "mlp.c_proj.bias": (d,),
        }
        shapes.update({f"h.{index}.{name}": shape for name, shape in block.items()})
    return shapes


def check_weights(checkpoint: Checkpoint, field_name: str = "model.path") -> None:
    """Every weight config.json implies is there in its shape, before anything runs. Safetensors
    headers are read, not the tensors (and the file must be as long as its header says); a zip-format
    ``pytorch_model.bin`` is mapped, not read, and an old-format one loaded."""
    from safetensors import SafetensorError, safe_open

    path = checkpoint.path
    found: dict[str, tuple[int, ...]] = {}
    if (path / "model.safetensors").is_file():
        files = [path / "model.safetensors"]
    elif (path / "model.safetensors.index.json").is_file():
        try:
            index = json.loads((path / "model.safetensors.index.json").read_text(encoding="utf-8"))
            files = [path / shard for shard in sorted(set(index["weight_map"].values()))]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise InputError(f"{field_name}: cannot read the safetensors index of {str(path)!r} ({error})") from None
    else:
        state = _read_pickled_state(path / "pytorch_model.bin", field_name, mmap=True)
        found = {name.removeprefix("transformer."): tuple(tensor.shape) for name, tensor in state.items()}
        files = []
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as weights:
                for name in weights.keys():  # noqa: SIM118 (a safe_open handle is not a dict)
                    found[name.removeprefix("transformer.")] = tuple(weights.get_slice(name).get_shape())
        except (SafetensorError, OSError) as error:
            raise InputError(f"{field_name}: cannot read {str(file)!r} as safetensors ({error})") from None
    for name, shape in expected_shapes(checkpoint.model_config()).items():
        if name not in found:
            raise InputError(
                f"{field_name}: the weights of {str(path)!r} lack {name!r} (allowed: a GPT-2 checkpoint with every "
                "block's weights)"
            )
        if found[name] != shape:
            raise InputError(
                f"{field_name}: weight {name} of {str(path)!r} has shape {found[name]}, config.json implies {shape}"
            )


def load_model(checkpoint: Checkpoint, field_name: str = "model.path") -> CharGPT:
    """The checkpoint's weights in a CharGPT (float32, eval mode)."""
    state = _read_state(checkpoint.path, field_name)
    config = checkpoint.model_config()
    try:
        mapped = to_decodelab_state(state, config.n_layer)
    except KeyError as error:
        raise InputError(
            f"{field_name}: the weights of {str(checkpoint.path)!r} lack {error.args[0]!r} "
            "(allowed: a GPT-2 checkpoint with every block's weights)"
        ) from None
    model = CharGPT(config)
    expected = model.state_dict()
    for name, tensor in mapped.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise InputError(
                f"{field_name}: weight {name} of {str(checkpoint.path)!r} has shape {tuple(tensor.shape)}, config.json "
                f"implies {tuple(expected[name].shape)}"
            )
    model.load_state_dict({name: tensor.float() for name, tensor in mapped.items()})
    return model.eval()


@dataclass(frozen=True)
class TokenCorpus(Corpus):
    """A text seen through a BPE tokenizer: tokens instead of characters everywhere the
    experiments use the corpus (prompts, the n-gram table, held-out loss)."""

    tokenizer: Any = field(default=None, compare=False, repr=False)
    vocab_size: int = 0

    @functools.cached_property
    def _tokens(self) -> torch.Tensor:
        return torch.tensor(self.tokenizer.encode(self.text).ids, dtype=torch.long)

    @property
    def vocabulary(self) -> list[str]:
        return [self.tokenizer.id_to_token(index) or "" for index in range(self.vocab_size)]

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text).ids)

    def decode(self, tokens: list[int]) -> str:
        return str(self.tokenizer.decode(tokens))

    def tokens(self) -> torch.Tensor:
        return self._tokens

    def prompt(self, count: int) -> list[int]:
        """The text's first ``count`` tokens."""
        return self._tokens[:count].tolist()

    def unigram_entropy_nats(self) -> float:
        counts = torch.bincount(self._tokens).double()
        frequencies = counts[counts > 0] / counts.sum()
        return float(-(frequencies * frequencies.log()).sum())


def token_corpus(text: Corpus, tokenizer: Any, vocab_size: int) -> TokenCorpus:
    return TokenCorpus(text=text.text, source=text.source, tokenizer=tokenizer, vocab_size=vocab_size)
