"""The dashboard's data folder: the only files a launch from the dashboard may train on.

A visitor of the dashboard is not a local user: a corpus path of theirs must not reach any
other file of the server (a worker would train on it and store a checkpoint of it), and a
refusal must not tell them whether some path exists. So a dashboard launch names as corpus only
``default`` or a file under the data folder (``decodelab dashboard --data-dir DIR``, default
``./data``); the path is resolved (symlinks followed) before it is compared, and a file over
64 MiB is refused too. The job records that it came from the dashboard and its data folder, and
the worker checks the corpus again where it runs: the file may have changed since.

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
