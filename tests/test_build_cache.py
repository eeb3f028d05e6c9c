"""The native build cache loads only what this user alone could have written: through the real
`decodelab machine profile --quick` (it builds and loads the roofline probe), a cache folder
others may write to, one owned by another user, and a library planted there are each refused
with one line before anything is loaded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.decoding.native_build import build_key
from tests.conftest import run_decodelab

NOBODY = 65534


def profile(tmp_path: Path, cache: Path) -> tuple[int, list[str]]:
    result = run_decodelab(
        "machine", "profile", "--quick", "--db", f"sqlite:///{tmp_path / 'store.db'}",
        cwd=tmp_path, timeout=300, DECODELAB_BUILD_DIR=str(cache),
    )  # fmt: skip
    return result.returncode, result.stderr.strip().splitlines()


def planted(cache: Path) -> Path:
    """A file under the name the probe's library will have: the key is computable by anyone."""
    cache.mkdir(mode=0o700)
    library = cache / f"roof_probe-{build_key('roof_probe.cpp', 'native', os.environ.get('CXX', 'c++'))}.so"
    library.write_bytes(b"\x7fELF planted")
    return library


def test_a_cache_folder_others_may_write_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "shared-cache"
    cache.mkdir()
    cache.chmod(0o777)
    code, lines = profile(tmp_path, cache)
    assert code == 2 and len(lines) == 1, lines
    assert f"the build cache's folder '{cache}' is writable by group or others" in lines[0]
    assert not list(cache.iterdir())  # nothing built there


def test_a_library_others_may_write_is_refused(tmp_path: Path) -> None:
    library = planted(tmp_path / "cache")
    library.chmod(0o666)
    code, lines = profile(tmp_path, tmp_path / "cache")
    assert code == 2 and len(lines) == 1, lines
    assert f"the build cache's library '{library}' is writable by group or others" in lines[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_folder_or_library_of_another_user_is_refused(tmp_path: Path) -> None:
    library = planted(tmp_path / "cache")
    library.chmod(0o755)
    os.chown(library, NOBODY, NOBODY)
    code, lines = profile(tmp_path, tmp_path / "cache")
    assert code == 2 and len(lines) == 1, lines
    assert f"library '{library}' is owned by user id {NOBODY}, not this user (0)" in lines[0]
    other = tmp_path / "other-cache"
    other.mkdir(mode=0o755)
    os.chown(other, NOBODY, NOBODY)
    code, lines = profile(tmp_path, other)
    assert code == 2 and f"folder '{other}' is owned by user id {NOBODY}" in lines[0], lines


def test_a_private_cache_builds_and_loads(tmp_path: Path) -> None:
    """The refusals are not all there is: a fresh private cache is built, 0700, its library 0755."""
    cache = tmp_path / "cache"
    code, lines = profile(tmp_path, cache)
    assert code == 0, lines
    assert cache.stat().st_mode & 0o777 == 0o700
    libraries = list(cache.glob("roof_probe-*.so"))
    assert len(libraries) == 1 and libraries[0].stat().st_mode & 0o777 == 0o755
