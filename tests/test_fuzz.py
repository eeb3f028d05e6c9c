"""Fuzzing the spec validator and the dashboard's launch form: whatever comes in, only the
validation error escapes, in one line that names the field."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dashboard.launch import LaunchRequest, build_spec
from runner.errors import InputError
from runner.fields import check_machine
from runner.spec.sweeps import validate
from tests.conftest import TINY_SPEC

# derandomize: the same examples on every run (a test suite that passes or fails by chance helps no one).
EXAMPLES = settings(
    max_examples=1000, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
FIELD_MESSAGE = re.compile(
    r"""^[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*|\[(?:\d+|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\])*: \S"""
)
TINY = tomllib.loads(TINY_SPEC.read_text())
KNOWN_KEYS = [
    "name",
    "device",
    "seed",
    "model",
    "train",
    "experiments",
    "d_model",
    "n_layer",
    "n_head",
    "context_length",
    "corpus",
    "steps",
    "batch_size",
    "sequence_length",
    "learning_rate",
    "kv_cache",
    "quantization",
    "speculative",
    "context_cost",
    "training_summary",
    "lengths",
    "widths",
    "pairs",
    "ks",
    "drafts",
    "precisions",
    "kernels",
    "group_size",
    "new_tokens",
    "repeats",
    "roundings",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["cpu", "cuda", "int8", "int4", "bigram", "fake", "default", "bfloat16"]),
)
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=12))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=20,
)


def mutate(base: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    """The tiny spec with one value (at any depth) replaced."""
    import copy

    spec = copy.deepcopy(base)
    node: Any = spec
    for key in path[:-1]:
        if not isinstance(node, dict):
            return spec
        node = node.setdefault(key, {})
    if isinstance(node, dict):
        node[path[-1]] = value
    return spec


def assert_field_error(error: InputError) -> None:
    message = str(error)
    assert "\n" not in message, message
    assert FIELD_MESSAGE.match(message), message


@pytest.mark.slow
@EXAMPLES
@given(st.dictionaries(keys, values, max_size=6))
@example(raw={"A\n": None})  # found by a random run: "$" let a trailing newline into the message
def test_random_specs_raise_only_field_errors(raw: dict[str, Any]) -> None:
    try:
        validate(raw)
    except InputError as error:
        assert_field_error(error)


@EXAMPLES
@given(st.lists(keys, min_size=1, max_size=4), values)
def test_mutated_valid_specs_raise_only_field_errors(path: list[str], value: Any) -> None:
    try:
        validate(mutate(TINY, path, value))
    except InputError as error:
        assert_field_error(error)


form_text = st.one_of(
    st.text(max_size=300),
    st.builds(
        lambda line, at: TINY_SPEC.read_text().replace("pairs = 3", line, 1) if at else line,
        st.text(max_size=40),
        st.booleans(),
    ),
)


@EXAMPLES
@given(
    source=st.one_of(st.sampled_from(["preset", "spec"]), st.text(max_size=10)),
    preset=st.one_of(st.sampled_from(["quick", "seed", "full"]), st.text(max_size=10)),
    experiments=st.lists(
        st.one_of(
            st.sampled_from(["kv_cache", "quantization", "speculative", "context_cost", "training_summary"]),
            st.text(max_size=10),
        ),
        max_size=6,
    ),
    spec_text=form_text,
    machine=st.text(max_size=250),
    confirmed=st.booleans(),
)
def test_the_launch_form_raises_only_field_errors(
    source: str, preset: str, experiments: list[str], spec_text: str, machine: str, confirmed: bool
) -> None:
    request = LaunchRequest(source, preset, experiments, spec_text, machine, confirmed)
    try:
        check_machine(request.machine)
        build_spec(request)
    except InputError as error:
        message = str(error)
        assert message.split(":")[0] in {
            "source",
            "preset",
            "experiments",
            "spec",
            "machine",
            "--preset",
        } or FIELD_MESSAGE.match(message), message
        assert "\n" not in message, message


# ---- the command line, through its real entry point ----------------------------------------

COMMANDS = [
    [],
    ["train"],
    ["run"],
    ["enqueue"],
    ["export"],
    ["import"],
    ["bench"],
    ["worker"],
    ["workers"],
    ["dashboard"],
    ["db"],
    ["db", "upgrade"],
    ["db", "current"],
    ["report"],
    ["report", "scale"],
    ["report", "context-cost"],
    ["report", "run"],
    ["report", "seeds"],
    ["report", "machines"],
    ["tag"],
    ["note"],
    ["ab"],
    ["runs"],
    ["recommend"],
    ["cancel"],
    ["nosuch"],
]
OPTIONS = [
    "--db", "--preset", "--spec", "--corpus", "--device", "--machine", "--once", "--until-empty", "--poll-seconds",
    "--stale-after-seconds", "--max-idle-seconds", "--heartbeat-seconds", "--store-outage-limit-seconds", "--hours",
    "--out", "--run", "--format", "--only", "--port", "--host", "--read-only", "--allow-remote-launch",
    "--prompt-tokens", "--new-tokens", "--tokens-per-user", "--budget-gib", "--baseline", "--remove",
    "--all-metrics", "--machines", "--reference", "--pin", "--behind-proxy", "--data-dir", "--timeout-seconds",
    "--limit", "--nosuch", "-x", "--",
]  # fmt: skip
VALUES = [
    "quick", "seed", "nope", "cpu", "cuda", "0", "-1", "1e309", "nan", "inf", "99999", "3.5", "abc", "",
    "0.0.0.0", "127.0.0.1", "::1", "json", "csv", "store_write", "sqlite:///nowhere/x.db", "not a url",
]  # fmt: skip


class ReachedTheStore(BaseException):
    """A valid invocation got as far as opening the store: where the fuzz stops it."""


def refuse_to_open(*_args: Any, **_kwargs: Any) -> Any:
    raise ReachedTheStore


def command_modules() -> list[Any]:
    """The cli package's modules that open a store (each imported its own ``open_store``)."""
    import importlib
    import pkgutil

    import cli

    # __main__ would run the command line on import.
    names = [info.name for info in pkgutil.iter_modules(cli.__path__) if info.name != "__main__"]
    modules = [importlib.import_module(f"cli.{name}") for name in names]
    return [module for module in modules if hasattr(module, "open_store")]


def test_the_fuzz_stops_every_command_module_at_the_store() -> None:
    names = {module.__name__ for module in command_modules()}
    assert {"cli.main", "cli.bench", "cli.ab", "cli.fleet", "cli.review_commands", "cli.roofline"} <= names


@pytest.mark.slow
@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(
    command=st.sampled_from(COMMANDS),
    tokens=st.lists(st.one_of(st.sampled_from(OPTIONS), st.sampled_from(VALUES), st.text(max_size=8)), max_size=6),
)
@example(command=["nosuch"], tokens=[])
@example(command=["bench"], tokens=[])
@example(command=["run"], tokens=["--nosuch"])
@example(command=["export"], tokens=["--run", "abc", "--out", "x"])
@example(command=["dashboard"], tokens=["--port", "99999"])
@example(command=["dashboard"], tokens=["--host", "0.0.0.0"])
@example(command=["report", "run"], tokens=["--run", "1", "--out", "x.pdf", "--format", "pdf"])
@example(command=["tag"], tokens=["--run", "abc", "suspect"])
@example(command=["report", "machines"], tokens=["--out", "x.md", "--format", "pdf"])
def test_the_command_line_ends_bad_input_in_one_line_and_exit_2(command: list[str], tokens: list[str]) -> None:
    import contextlib
    import io
    import os
    import tempfile

    import pytest

    import store.engine
    from cli import main as cli

    stderr = io.StringIO()
    with (
        pytest.MonkeyPatch.context() as patch,
        tempfile.TemporaryDirectory() as directory,
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(stderr),
    ):
        patch.chdir(directory)  # report context-cost --out . writes here
        patch.delenv("DECODELAB_DB", raising=False)
        # Every command module's own name for it: a module left out ran its command for real
        # (`bench` with no options ran the benchmarks, four minutes of the suite).
        for module in command_modules():
            patch.setattr(module, "open_store", refuse_to_open)
        patch.setattr(store.engine, "create_store_engine", refuse_to_open)
        patch.setattr(os, "execve", refuse_to_open)
        try:
            cli.main([*command, *tokens])
        except ReachedTheStore:
            return
        except SystemExit as exited:
            code = exited.code
        else:
            raise AssertionError("main() returned without exiting")
    if code == 0:
        return
    lines = stderr.getvalue().strip().splitlines()
    assert code == 2, (code, stderr.getvalue())
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr.getvalue()
