"""The deployment files in deploy/ parse, and each runs a decodelab command that exists, with
options that exist, against $DECODELAB_DB from a secret."""

from __future__ import annotations

import configparser
import contextlib
import io
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from cli.main import main

DEPLOY = Path(__file__).parent.parent / "deploy"


def assert_is_a_command(argv: list[str]) -> None:
    """`decodelab ARGS --help` exits 0 only when the command and every option in ARGS exist."""
    assert Path(argv[0]).name == "decodelab", argv
    output = io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output), pytest.raises(SystemExit) as exited:
        main([*argv[1:], "--help"])
    assert exited.value.code == 0, output.getvalue()
    assert argv[1:] == ["worker", "--until-empty"], argv


def test_the_systemd_unit() -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    unit.read(DEPLOY / "decodelab-worker.service")
    assert set(unit.sections()) == {"Unit", "Service", "Install"}
    service = unit["Service"]
    assert_is_a_command(shlex.split(service["ExecStart"]))
    assert service["EnvironmentFile"].startswith("/etc/"), "the store URL comes from a root-only file"
    assert service["KillSignal"] == "SIGTERM" and "130" in service["SuccessExitStatus"].split()
    # ProtectSystem=strict: every folder the worker writes must be one of ReadWritePaths.
    assert service["ProtectSystem"] == "strict" and service["PrivateTmp"] == "true"
    writable = [Path(path) for path in service["ReadWritePaths"].split()]
    environment = dict(assignment.split("=", 1) for assignment in shlex.split(service["Environment"]))
    for name in ("DECODELAB_BUILD_DIR", "HOME", "XDG_CACHE_HOME"):
        assert any(Path(environment[name]).is_relative_to(folder) for folder in writable), name
    assert Path(service["WorkingDirectory"]) in writable


def test_the_kubernetes_job() -> None:
    manifest = yaml.safe_load((DEPLOY / "decodelab-worker-job.yaml").read_text())
    assert (manifest["apiVersion"], manifest["kind"]) == ("batch/v1", "Job")
    assert "completions" not in manifest["spec"], "work-queue pattern: the Job ends when its pods do"
    pod = manifest["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert_is_a_command(container["command"])
    environment = {variable["name"]: variable for variable in container["env"]}
    assert environment["DECODELAB_DB"]["valueFrom"]["secretKeyRef"]["key"] == "url"
    assert environment["DECODELAB_MACHINE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    build = environment["DECODELAB_BUILD_DIR"]["value"]
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert any(Path(build).is_relative_to(path) and "emptyDir" in volumes[name] for name, path in mounts.items())
    # Not the emptyDir's mount point itself (writable by everyone, so refused as a build cache).
    assert Path(build) not in {Path(path) for path in mounts.values()}


def test_the_slurm_batch_script() -> None:
    script = DEPLOY / "decodelab-worker.sbatch"
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    lines = script.read_text().splitlines()
    directives = {key: value for key, _, value in (line.removeprefix("#SBATCH ").partition("=") for line in lines)}
    assert directives["--signal"].startswith("B:TERM@") and "--array" in directives
    (command,) = [line for line in lines if line.startswith("exec decodelab ")]
    assert_is_a_command(shlex.split(command)[1:])
    assert any("DECODELAB_SECRET_FILE" in line for line in lines), "the store URL comes from a private file"
