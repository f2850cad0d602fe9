"""``run_parser``: Slurm's parser check of a candidate config, on the host branch (no tools root).

A fake ``scontrol`` stands for Slurm's: it refuses a slurm.conf with a line starting ``NoSuchKey`` with the
lines real scontrol prints, and logs what it was given (SLURM_CONF and the files next to it) to a file.
"""

from __future__ import annotations

import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from activities.cluster import as_one_slurmctld, run_parser
from slinky.operator.reconfigure import ConfigCheck

SLURM_ERROR = "scontrol: error: _parse_next_key: Parsing error at unrecognized key: NoSuchKey"
SLURM_FATAL = "scontrol: fatal: Unable to process configuration file"
GOOD = {"slurm.conf": "ClusterName=hpc\nSlurmctldHost=slurm-controller-0\n", "gres.conf": "Name=gpu File=/dev/null\n"}
BAD = {"slurm.conf": "ClusterName=hpc\nNoSuchKey=1\n", "gres.conf": "Name=gpu File=/dev/null\n"}

SCRIPT = """#!/bin/sh
echo "SLURM_CONF=$SLURM_CONF" >> {log}
echo "ARGS=$*" >> {log}
ls "$(dirname "$SLURM_CONF")" | sed 's/^/FILE=/' >> {log}
if grep -q '^NoSuchKey' "$SLURM_CONF"; then
  echo "{error}" >&2
  echo "{fatal}" >&2
  exit 1
fi
echo localhost
exit 0
"""


@dataclass
class Tools:
    bin: Path
    log: Path
    scratch_base: Path
    argv: list[list[str]] = field(default_factory=list)

    def logged(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def leftovers(self) -> list[Path]:
        return list(self.scratch_base.iterdir())


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tools]:
    """A fake scontrol first on PATH, and the scratch directories made under a directory of the test's own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "scontrol.log"
    script = bin_dir / "scontrol"
    script.write_text(SCRIPT.format(log=log, error=SLURM_ERROR, fatal=SLURM_FATAL))
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    scratch_base = tmp_path / "tmp"
    scratch_base.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_base))
    yield Tools(bin=bin_dir, log=log, scratch_base=scratch_base)


@pytest.fixture
def spied(tools: Tools, monkeypatch: pytest.MonkeyPatch) -> Tools:
    """Work around the PATH reset (see the xfail tests): the command run_parser builds, with the fake's
    directory put in front of the ``PATH=`` that ``env -i`` sets. Everything else is run as built."""
    real = subprocess.run

    def run(argv: list[str], **kwargs: Any) -> Any:
        tools.argv.append(list(argv))
        patched = [f"PATH={tools.bin}:{a.removeprefix('PATH=')}" if a.startswith("PATH=") else a for a in argv]
        return real(patched, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    return tools


def test_without_scontrol_on_path_nothing_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    scratch_base = tmp_path / "tmp"
    scratch_base.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_base))

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no scontrol: nothing to run")

    monkeypatch.setattr(subprocess, "run", never)
    result = run_parser(BAD, "")
    assert result.checked is False and result.ok is True
    assert "not checked" in result.error
    assert list(scratch_base.iterdir()) == [], "no scratch directory without a parser"


def test_a_valid_config_passes_slurms_parser(spied: Tools) -> None:
    assert run_parser(GOOD, "") == ConfigCheck(ok=True, error="", checked=True)
    assert spied.leftovers() == [], "the scratch directory is removed"


def test_a_bad_key_is_refused_with_slurms_own_message(spied: Tools) -> None:
    result = run_parser(BAD, "")
    assert result.ok is False and result.checked is True
    assert result.error == f"{SLURM_ERROR}; {SLURM_FATAL}"
    assert spied.leftovers() == [], "the scratch directory is removed after a refusal too"


def test_scontrol_reads_every_file_from_one_scratch_directory(spied: Tools) -> None:
    run_parser(GOOD, "")
    logged = spied.logged()
    conf = next(line.removeprefix("SLURM_CONF=") for line in logged if line.startswith("SLURM_CONF="))
    scratch = Path(conf).parent
    assert Path(conf).name == "slurm.conf"
    assert scratch.parent == spied.scratch_base and scratch.name.startswith("slinky-conf-check-")
    assert sorted(line for line in logged if line.startswith("FILE=")) == ["FILE=gres.conf", "FILE=slurm.conf"]
    assert "ARGS=show hostnames localhost" in logged
    assert not scratch.exists()


def test_the_command_has_a_clean_environment_and_no_chroot(spied: Tools) -> None:
    run_parser(GOOD, "")
    (argv,) = spied.argv
    assert argv[:2] == ["env", "-i"], "nothing of the operator's environment reaches scontrol"
    assert argv[2].startswith("PATH=") and len(argv) == 8
    assert argv[3].startswith(f"SLURM_CONF={spied.scratch_base}/slinky-conf-check-")
    assert argv[3].endswith("/slurm.conf")
    assert argv[4:] == [str(spied.bin / "scontrol"), "show", "hostnames", "localhost"], "the scontrol found, by path"
    assert "chroot" not in argv


def test_a_hung_scontrol_skips_the_check_and_leaves_no_scratch(tools: Tools, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken checker never refuses a config (that would mark it rejected for good): not checked, said so."""

    def hangs(argv: list[str], **kwargs: Any) -> Any:
        assert any(tools.scratch_base.iterdir()), "the files are written before scontrol runs"
        raise subprocess.TimeoutExpired(argv, kwargs.get("timeout", 0))

    monkeypatch.setattr(subprocess, "run", hangs)
    result = run_parser(GOOD, "")
    assert (result.ok, result.checked) == (True, False) and "could not run" in result.error
    assert tools.leftovers() == []


def test_a_failure_without_slurm_lines_returns_the_output(tools: Tools, monkeypatch: pytest.MonkeyPatch) -> None:
    def odd(argv: list[str], **kwargs: Any) -> Any:
        return subprocess.CompletedProcess(argv, 3, stdout="something else went wrong\n", stderr="")

    monkeypatch.setattr(subprocess, "run", odd)
    assert run_parser(GOOD, "") == ConfigCheck(ok=False, error="something else went wrong")


# The host branch runs the scontrol that shutil.which found on the operator's PATH (an scontrol in
# /usr/local/bin or /opt/slurm/bin too), by its absolute path: `env -i PATH=...` must not hide it.
def test_the_scontrol_found_on_path_accepts_a_valid_config(tools: Tools) -> None:
    assert run_parser(GOOD, "") == ConfigCheck(ok=True)
    assert any(line.startswith("SLURM_CONF=") for line in tools.logged()), "the fake scontrol ran"


def test_the_scontrol_found_on_path_refuses_a_bad_key(tools: Tools) -> None:
    result = run_parser(BAD, "")
    assert result.ok is False and result.error == f"{SLURM_ERROR}; {SLURM_FATAL}"
    assert tools.leftovers() == []


def _pod(name: str, hash_: str, ended: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"name": "slurmctld", "state": {"running": {}}}
    if ended is not None:
        status["lastState"] = {"terminated": ended}
    return {
        "metadata": {"name": name, "uid": name, "annotations": {"slinky.slurm.net/slurm-config-hash": hash_}},
        "status": {"containerStatuses": [status]},
    }


def test_a_primary_and_its_backups_are_judged_as_one_slurmctld() -> None:
    primary, backup = _pod("c-0", "old"), _pod("c-1", "new")
    # Mid rolling update (the backup first): the primary's old hash is what runs, so it is not verified yet.
    assert as_one_slurmctld([primary, backup], "new") == (primary, "old")
    rolled = [_pod("c-0", "new"), _pod("c-1", "new")]
    assert as_one_slurmctld(rolled, "new") == (rolled[0], "new")
    # A backup that ended on the new config is the one reported, with the new hash (judge then sees a failure).
    early = {"exitCode": 1, "finishedAt": "2026-11-29T10:00:00Z", "message": "early"}
    late = {"exitCode": 1, "finishedAt": "2026-11-29T10:05:00Z", "message": "fatal: bad key"}
    failing = [_pod("c-0", "new", early), _pod("c-1", "new", late), _pod("c-2", "old", late)]
    assert as_one_slurmctld(failing, "new") == (failing[1], "new")
