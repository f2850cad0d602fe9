"""The Slurm images' entry points (deploy/images/slurm/*.sh), run with stand-ins for tini and the daemons that
print the command line they were given: the options environment, the container's arguments, and slurmd's
--conf items from POD_CPUS / POD_MEMORY / POD_TOPOLOGY, as upstream's images do."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[3] / "deploy" / "images" / "slurm"
HARDWARE = "NodeName=n CPUs=8 Boards=1 SocketsPerBoard=2 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=16000"


def run(tmp_path: Path, script: str, *args: str, **env: str) -> list[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "tini").write_text('#!/bin/sh\nshift 2\nprintf "%s\\n" "$@"\n')  # drop "-g --"
    (bin_dir / "slurmd").write_text(f'#!/bin/sh\n[ "$1" = -C ] && echo "{HARDWARE}"\n')
    (bin_dir / "mkdir").write_text("#!/bin/sh\nexit 0\n")  # /run is not ours here
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    done = subprocess.run(
        ["bash", str(SCRIPTS / script), *args],
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLINKY_LIB": str(SCRIPTS), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def test_slurmd_runs_in_the_foreground_with_options_then_arguments(tmp_path: Path) -> None:
    argv = run(tmp_path, "slurmd-entrypoint.sh", "-Z", "--conf-server", "c:6817", SLURMD_OPTIONS="-v")
    assert argv == ["slurmd", "-D", "-v", "-Z", "--conf-server", "c:6817"]


def test_slurmd_keeps_the_rest_of_the_machine_from_jobs_by_the_pods_limits(tmp_path: Path) -> None:
    argv = run(
        tmp_path,
        "slurmd-entrypoint.sh",
        "-Z",
        "--conf",
        "Features=cpu Weight=2",
        POD_CPUS="2",
        POD_MEMORY="4000",
        POD_TOPOLOGY="rack1",
    )
    # 8 cores, 2 for the pod: 6 specialised; 16000 MiB, 4000 for the pod.
    assert argv[-1] == "Features=cpu Weight=2 CoreSpecCount=6 MemSpecLimit=12000 Topology=rack1"
    assert argv[:4] == ["slurmd", "-D", "-Z", "--conf"]


def test_slurmd_adds_a_conf_when_none_is_given_and_none_without_limits(tmp_path: Path) -> None:
    assert run(tmp_path, "slurmd-entrypoint.sh", "-Z", POD_MEMORY="1000")[-2:] == ["--conf", "MemSpecLimit=15000"]
    assert run(tmp_path, "slurmd-entrypoint.sh", "--conf=Features=a", POD_CPUS="1")[-1] == (
        "--conf=Features=a CoreSpecCount=7"
    )
    assert run(tmp_path, "slurmd-entrypoint.sh", "-Z") == ["slurmd", "-D", "-Z"]


def test_slurmctld_and_sackd_take_their_options_then_their_arguments(tmp_path: Path) -> None:
    assert run(tmp_path, "slurmctld-entrypoint.sh", "-i", SLURMCTLD_OPTIONS="-v") == ["slurmctld", "-D", "-v", "-i"]
    sackd = run(tmp_path, "sackd-entrypoint.sh", "--conf-server", "c:6817", SACKD_OPTIONS="-v")
    assert sackd == ["sackd", "-D", "-v", "--conf-server", "c:6817"]


def test_the_login_entrypoint_takes_sackd_options_only(tmp_path: Path) -> None:
    argv = run(tmp_path, "login-entrypoint.sh", "--ignored", SACKD_OPTIONS="--conf-server 'c:6817'")
    assert argv == ["sackd", "-D", "--conf-server", "c:6817"]


def test_sshd_runs_beside_the_daemon_only_with_sshd_1(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marks = tmp_path / "started"
    (bin_dir / "sshd").write_text(f'#!/bin/sh\necho "sshd $*" >> {marks}\n')
    (bin_dir / "ssh-keygen").write_text(f'#!/bin/sh\necho "ssh-keygen $*" >> {marks}\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    script = (
        (SCRIPTS / "ssh-services.sh")
        .read_text()
        .replace("/usr/sbin/sshd", "sshd")
        .replace("/etc/ssh/", f"{tmp_path}/ssh/")
    )
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "ssh-services.sh").write_text(script)
    run(tmp_path, "login-entrypoint.sh", SLINKY_LIB=str(tmp_path / "lib"), PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert not marks.exists(), "no SSHD=1: no sshd"
    run(
        tmp_path,
        "login-entrypoint.sh",
        SLINKY_LIB=str(tmp_path / "lib"),
        SSHD="1",
        PATH=f"{bin_dir}:{os.environ['PATH']}",
    )
    started = marks.read_text().splitlines()
    assert started[0] == "ssh-keygen -A", "no host keys mounted: it makes its own"
    assert "sshd -D -e" in started
