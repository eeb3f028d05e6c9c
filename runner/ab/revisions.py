"""The two revisions of an A/B session, checked before anything runs: each a commit of a decodelab
tree, HEAD without uncommitted changes when it is measured, both with the same dependencies (one
environment runs both), each at the store's schema; then each checked out in a worktree of its own.

Every refusal is one InputError naming the side (``--baseline`` or ``--candidate``) and the cause."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import InputError

SIDES = ("baseline", "candidate")
# A file every decodelab tree that `ab` can drive holds (the worker imports from it).
DECODELAB_MARKER = "runner/execution/execute.py"
MIGRATIONS = "store/migrations/versions"
_REVISION_LINE = re.compile(r"^(down_revision|revision)\s*(?::[^=]*)?=\s*(?:\"([^\"]*)\"|'([^']*)'|None)", re.M)


@dataclass(frozen=True)
class Revision:
    """One side: its name (baseline, candidate), what was asked for, and the commit it resolved to."""

    side: str
    asked: str
    commit: str

    @property
    def short(self) -> str:
        return self.commit[:12]

    @property
    def option(self) -> str:
        return f"--{self.side}"

    @property
    def tag(self) -> str:
        """The run's tag naming its revision (store.annotations allows up to 40 characters)."""
        return f"rev:{self.short}"


def git(repository: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repository), *args], capture_output=True, text=True)


def repository_root(path: Path) -> Path:
    """The top of the git checkout holding ``path``."""
    if not path.is_dir():
        raise InputError(f"--repo: {str(path)!r} is not a directory")
    found = git(path, "rev-parse", "--show-toplevel")
    if found.returncode != 0:
        raise InputError(f"--repo: {str(path)!r} is not inside a git checkout (allowed: a checkout of decodelab)")
    return Path(found.stdout.strip())


def resolve(repository: Path, side: str, asked: str) -> Revision:
    """The commit ``asked`` names, checked to be a decodelab tree."""
    option = f"--{side}"
    if not asked.strip() or asked.startswith("-"):
        raise InputError(f"{option}: {asked!r} is not a revision (allowed: a commit, branch or tag of {repository})")
    found = git(repository, "rev-parse", "--verify", "--quiet", f"{asked}^{{commit}}")
    if found.returncode != 0:
        raise InputError(f"{option}: {asked!r} is not a revision of {repository} (git knows no such commit)")
    revision = Revision(side, asked, found.stdout.strip())
    if git(repository, "cat-file", "-e", f"{revision.commit}:{DECODELAB_MARKER}").returncode != 0:
        raise InputError(f"{option}: {asked} ({revision.short}) is not a decodelab tree (no {DECODELAB_MARKER})")
    return revision


def check_clean(repository: Path, revisions: tuple[Revision, ...]) -> None:
    """Refuse to measure HEAD while the checkout has uncommitted changes: the worktree holds the
    commit, not what the person sees in their files, and the report would name the wrong code."""
    head = git(repository, "rev-parse", "HEAD").stdout.strip()
    changed = git(repository, "status", "--porcelain", "--untracked-files=no").stdout.splitlines()
    if not changed:
        return
    for revision in revisions:
        if revision.commit == head:
            files = [line[3:] for line in changed]
            shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
            raise InputError(
                f"{revision.option}: {revision.asked} ({revision.short}) is the checked-out commit, and the checkout "
                f"has uncommitted changes ({shown}): commit or stash them (ab measures commits, not the working tree)"
            )


def file_at(repository: Path, revision: Revision, path: str) -> str | None:
    shown = git(repository, "show", f"{revision.commit}:{path}")
    return shown.stdout if shown.returncode == 0 else None


def dependencies(repository: Path, revision: Revision) -> dict[str, list[str]]:
    """The revision's declared dependencies: pyproject's project.dependencies and each extra."""
    text = file_at(repository, revision, "pyproject.toml")
    if text is None:
        raise InputError(f"{revision.option}: {revision.asked} ({revision.short}) has no pyproject.toml")
    try:
        project: dict[str, Any] = tomllib.loads(text).get("project", {})
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"{revision.option}: {revision.short}'s pyproject.toml does not parse: {error}") from None
    declared = {"dependencies": sorted(project.get("dependencies", []))}
    for extra, names in sorted(project.get("optional-dependencies", {}).items()):
        declared[f"extra {extra}"] = sorted(names)
    return declared


def check_one_environment(repository: Path, baseline: Revision, candidate: Revision) -> None:
    """Both sides run in this one environment: refuse where their dependencies differ."""
    ours, theirs = dependencies(repository, baseline), dependencies(repository, candidate)
    if ours == theirs:
        return
    differences: list[str] = []
    for group in sorted(ours.keys() | theirs.keys()):
        added = sorted(set(theirs.get(group, [])) - set(ours.get(group, [])))
        removed = sorted(set(ours.get(group, [])) - set(theirs.get(group, [])))
        differences += [f"{group} +{name}" for name in added] + [f"{group} -{name}" for name in removed]
    raise InputError(
        f"--candidate: {candidate.short}'s pyproject.toml dependencies differ from the baseline's "
        f"{baseline.short} ({'; '.join(differences[:4])}): both sides run in one environment "
        "(allowed: revisions whose dependencies agree)"
    )


def schema_head(repository: Path, revision: Revision) -> str | None:
    """The newest store schema revision the revision's migrations define (None: it has none)."""
    listed = git(repository, "ls-tree", "--name-only", revision.commit, f"{MIGRATIONS}/")
    defined: set[str] = set()
    replaced: set[str] = set()
    for path in listed.stdout.split():
        if not path.endswith(".py"):
            continue
        for kind, double, single in _REVISION_LINE.findall(file_at(repository, revision, path) or ""):
            value = double or single
            if value:
                (defined if kind == "revision" else replaced).add(value)
    heads = sorted(defined - replaced)
    return heads[-1] if heads else None


def check_schema(repository: Path, revisions: tuple[Revision, ...], store_revision: str | None) -> None:
    """Each side opens the store with its own code: refuse a revision whose migrations end
    elsewhere than the store's schema (older: its code cannot read the store; newer: its code
    would migrate the store under the other side)."""
    for revision in revisions:
        head = schema_head(repository, revision)
        if head == store_revision:
            continue
        older = head is None or (store_revision is not None and head < store_revision)
        raise InputError(
            f"{revision.option}: {revision.asked} ({revision.short}) is {'older' if older else 'newer'} than the "
            f"store's schema (its migrations end at {head or 'none'}, the store is at {store_revision}): "
            "both sides must read the store as it is (allowed: revisions at the store's schema)"
        )


class Worktrees:
    """Each revision checked out in a worktree of its own under a temporary folder, removed (and
    unregistered from the repository) on exit."""

    def __init__(self, repository: Path) -> None:
        self.repository = repository
        self.folder = Path(tempfile.mkdtemp(prefix="decodelab-ab-"))
        self.paths: list[Path] = []

    def add(self, revision: Revision) -> Path:
        path = self.folder / f"{revision.side}-{revision.short}"
        added = git(self.repository, "worktree", "add", "--detach", str(path), revision.commit)
        if added.returncode != 0:
            reason = (added.stderr.strip().splitlines() or ["git worktree add failed"])[-1]
            raise InputError(f"{revision.option}: {revision.short} could not be checked out: {reason}")
        self.paths.append(path)
        return path

    def close(self) -> None:
        for path in self.paths:
            git(self.repository, "worktree", "remove", "--force", str(path))
        git(self.repository, "worktree", "prune")
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Worktrees:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
