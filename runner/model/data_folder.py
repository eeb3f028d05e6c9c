"""The dashboard's data folder: the only files a launch from the dashboard may train on.

A visitor of the dashboard is not a local user: a corpus path of theirs must not reach any
other file of the server (a worker would train on it and store a checkpoint of it), and a
refusal must not tell them whether some path exists. So a dashboard launch names as corpus only
``default`` or a file under the data folder (``decodelab dashboard --data-dir DIR``, default
``./data``); the path is resolved (symlinks followed) before it is compared, and a file over
64 MiB is refused too. The job records that it came from the dashboard and its data folder, and
the worker checks the corpus again where it runs: the file may have changed since.

Models too: a Hugging Face checkpoint (``[model] path``) and every ``hf:`` draft named by a
dashboard launch must be a model folder (one with config.json) under the data folder, every
file in it resolving inside the folder, checked before anything in it is read; the refusal is
one fixed line per field, saying nothing of what the path holds. The worker checks again.

The command line (a local user) keeps any readable path; it never goes through here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.errors import InputError

# runner.model.corpus.DEFAULT_CORPUS, not imported: that module loads torch, and every command imports this one.
DEFAULT_CORPUS = "default"

DEFAULT_DATA_DIR = Path("data")
MAX_CORPUS_BYTES = 64 * 2**20
# The most files the form offers (a data folder holding a whole disk is no menu).
MAX_LISTED_FILES = 1000
# An hf draft is named "hf:PATH": the spec's drafts and the checkpoint loader read it from here.
DRAFT_PREFIX = "hf:"
# The most entries a model folder may hold (a checkpoint has a handful): the check walks them all.
MAX_MODEL_FOLDER_ENTRIES = 1000
# The job spec's key saying a dashboard launched it: {"data_dir": the absolute data folder}.
# The validator refuses it in a spec, so a visitor's TOML cannot set or clear it.
DASHBOARD_JOB_KEY = "launched_from_dashboard"


def _inside(path: Path, folder: Path) -> Path | None:
    """``path`` resolved, if it is a regular file of at most MAX_CORPUS_BYTES under ``folder``."""
    try:
        resolved = path.resolve(strict=True)
        if not resolved.is_relative_to(folder.resolve(strict=True)) or not resolved.is_file():
            return None
        return resolved if resolved.stat().st_size <= MAX_CORPUS_BYTES else None
    except (OSError, RuntimeError):  # missing, unreadable, a symlink loop
        return None


def data_files(data_dir: Path) -> list[str]:
    """The files a dashboard launch may use, as paths relative to the data folder, sorted."""
    found: list[str] = []
    try:
        candidates = sorted(data_dir.rglob("*"))
    except OSError:
        return found
    for candidate in candidates:
        if _inside(candidate, data_dir) is not None:
            found.append(candidate.relative_to(data_dir).as_posix())
            if len(found) == MAX_LISTED_FILES:
                break
    return found


def refusal(data_dir: Path) -> InputError:
    """The one line for any corpus a dashboard launch may not use: it says nothing of the path."""
    return InputError(
        f"corpus: only 'default' or a file in the data folder ({len(data_files(data_dir))} files there) "
        "may be used from the dashboard"
    )


def dashboard_corpus(corpus: str, data_dir: Path) -> str:
    """``default``, or the resolved absolute path of a file under ``data_dir`` (a name relative
    to it, or an absolute path inside it); the refusal otherwise."""
    if corpus == DEFAULT_CORPUS:
        return corpus
    candidate = Path(corpus)
    resolved = _inside(candidate if candidate.is_absolute() else data_dir / candidate, data_dir)
    if resolved is None:
        raise refusal(data_dir)
    return str(resolved)


def _model_inside(path: Path, folder: Path) -> Path | None:
    """``path`` resolved, if it is a folder under ``folder`` holding config.json, everything in
    it resolving inside ``folder`` too (no link out to another file of the server)."""
    try:
        root = folder.resolve(strict=True)
        resolved = path.resolve(strict=True)
        if not resolved.is_relative_to(root) or not resolved.is_dir() or not (resolved / "config.json").is_file():
            return None
        for count, entry in enumerate(resolved.rglob("*")):
            if count >= MAX_MODEL_FOLDER_ENTRIES or not entry.resolve(strict=True).is_relative_to(root):
                return None
        return resolved
    except (OSError, RuntimeError):  # missing, unreadable, a symlink loop
        return None


def model_folders(data_dir: Path) -> int:
    """How many model folders the data folder holds (what a refusal may say)."""
    try:
        candidates = sorted(data_dir.rglob("config.json"))[:MAX_LISTED_FILES]
    except OSError:
        return 0
    return sum(_model_inside(candidate.parent, data_dir) is not None for candidate in candidates)


def model_refusal(field: str, data_dir: Path) -> InputError:
    """The one line for any model path a dashboard launch may not use: it says nothing of the path."""
    return InputError(
        f"{field}: only a model folder in the data folder ({model_folders(data_dir)} there) may be used "
        "from the dashboard"
    )


def _model_fields(raw: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """Every model path a spec names: (field, the path, where to put it back), where the
    setter is (container, key) for [model] path and each hf: entry of an experiment's list."""
    found: list[tuple[str, str, Any]] = []
    model = raw.get("model")
    if isinstance(model, dict) and model.get("path"):
        found.append(("model.path", str(model["path"]), (model, "path")))
    experiments = raw.get("experiments")
    for name, section in experiments.items() if isinstance(experiments, dict) else []:
        for key, value in section.items() if isinstance(section, dict) else []:
            for index, entry in enumerate(value) if isinstance(value, list) else []:
                if isinstance(entry, str) and entry.startswith(DRAFT_PREFIX):
                    found.append((f"experiments.{name}.{key}[{index}]", entry[len(DRAFT_PREFIX) :], (value, index)))
    return found


def dashboard_models(raw: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    """The spec with every model path (``[model] path``, ``hf:`` drafts) resolved inside the
    data folder; the fixed refusal for the first that is not. Nothing in a path is read first."""
    import copy

    confined = copy.deepcopy(raw)
    for field, path_text, (container, key) in _model_fields(confined):
        candidate = Path(path_text)
        resolved = _model_inside(candidate if candidate.is_absolute() else data_dir / candidate, data_dir)
        if resolved is None:
            raise model_refusal(field, data_dir)
        container[key] = str(resolved) if field == "model.path" else f"{DRAFT_PREFIX}{resolved}"
    return confined


def check_dashboard_models(raw: dict[str, Any], mark: dict[str, Any]) -> None:
    """Where a dashboard's job runs, before its spec is validated (which reads checkpoints):
    each model path must still be that very folder under the recorded data folder."""
    data_dir = mark.get("data_dir")
    for field, path_text, _ in _model_fields(raw):
        if not isinstance(data_dir, str) or not Path(data_dir).is_absolute():
            raise InputError(f"{field}: only a model folder in the data folder may be used from the dashboard")
        resolved = _model_inside(Path(path_text), Path(data_dir))
        if resolved is None or str(resolved) != path_text:
            raise model_refusal(field, Path(data_dir))


def mark_dashboard_job(raw: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    """The job spec of a dashboard launch: the validated spec plus where it came from."""
    return {**raw, DASHBOARD_JOB_KEY: {"data_dir": str(data_dir.resolve())}}


def split_dashboard_job(job_spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A job's spec without the dashboard's mark, and the mark (None: a job from the command line)."""
    if not isinstance(job_spec, dict) or DASHBOARD_JOB_KEY not in job_spec:
        return job_spec, None
    spec = {key: value for key, value in job_spec.items() if key != DASHBOARD_JOB_KEY}
    mark = job_spec[DASHBOARD_JOB_KEY]
    return spec, mark if isinstance(mark, dict) else {}


def check_dashboard_job(corpus: str, mark: dict[str, Any]) -> None:
    """Where a dashboard's job runs: its corpus must still be ``default`` or that file under the
    data folder the job recorded. A mark without a folder allows no file (it fails closed)."""
    if corpus == DEFAULT_CORPUS:
        return
    data_dir = mark.get("data_dir")
    if not isinstance(data_dir, str) or not Path(data_dir).is_absolute():
        raise InputError("corpus: only 'default' or a file in the data folder may be used from the dashboard")
    if dashboard_corpus(corpus, Path(data_dir)) != corpus:
        raise refusal(Path(data_dir))
