"""Several bridge replicas: the bridge's burst rate with one replica and with two, the followers' submits queued or
relayed through the leader, in one run (issue 16, goal 3).

Needs the local stack (``slinky dev up``). For each configuration it stops the stack's bridge worker, starts the
replicas as the chart runs them (leader election on a Lease of their own; eager start only with one replica; with
``relay``, the submit relay on 127.0.0.1), waits for one to lead, runs ``bench.bridge --only bridge --rounds 0``
(bursts of ``--pods``), and stops them. The stack's worker is started again at the end, also on an error.
Reports each configuration's bursts (pods bound per second), their median, the CPU per pod of the replicas
together (from /proc, over the whole ``bench.bridge`` run, its settling included), the submits the leader took
from its followers, and the ratio of each median to the one replica's. Usage::

    .venv/bin/python -m bench.replicas --pods 64 --bursts 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Progress, cpu_seconds
from slinky.dev import stack

CONFIGS: dict[str, tuple[int, bool]] = {"one": (1, False), "two": (2, False), "two+relay": (2, True)}
REPO = Path(__file__).resolve().parent.parent
RELAY_PORT = 17400


def _replica_env(name: str, index: int, replicas: int, relay: bool) -> dict[str, str]:
    env = {k: v for k, v in stack.env_values().items() if k != "PATH"}
    env.update(
        {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(Path.home()),
            "PYTHONUNBUFFERED": "1",
            "SLINKY_LEADER_ELECTION__ENABLED": "true",
            "SLINKY_LEADER_ELECTION__NAMESPACE": "default",
            "SLINKY_LEADER_ELECTION__NAME": f"bench-replicas-{name.replace('+', '-')}-{os.getpid()}",
            "SLINKY_LEADER_ELECTION__IDENTITY": f"replica-{index}",
            "SLINKY_WORKER__EAGER_START": str(replicas == 1).lower(),
        }
    )
    if relay:
        env["SLINKY_WORKER__SUBMIT_RELAY_PORT"] = str(RELAY_PORT + index)
        env["SLINKY_WORKER__SUBMIT_RELAY_HOST"] = "127.0.0.1"
    return env


def _wait_for(what: str, done: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench.replicas: timed out waiting for {what}")
        time.sleep(0.2)


def run_config(name: str, args: argparse.Namespace, logs: Path, progress: Progress) -> dict[str, Any]:
    replicas, relay = CONFIGS[name]
    procs: list[subprocess.Popen[bytes]] = []
    paths = [logs / f"{name}-{i}.log" for i in range(replicas)]
    try:
        for i, path in enumerate(paths):
            with path.open("wb") as out:
                env = _replica_env(name, i, replicas, relay)
                cmd = [sys.executable, "-m", "workers"]
                procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=out))
            if i == 0:
                _wait_for("the first replica to lead", lambda: "replica leads" in paths[0].read_text(), 60)
            else:
                _wait_for(f"replica {i} to poll", lambda p=path: "bridge worker running" in p.read_text(), 60)
        time.sleep(2.0)  # the followers' electors have read the Lease (every 2 s)
        progress.phase(f"{name}: {replicas} replica(s), relay {'on' if relay else 'off'}: bursts of {args.pods}")
        before = sum(cpu_seconds(p.pid) or 0.0 for p in procs)
        bench = [sys.executable, "-m", "bench.bridge", "--only", "bridge", "--rounds", "0", "--json"]
        bench += ["--bursts", str(args.bursts), "--pods", str(args.pods), "--nodes", str(args.pods)]
        bench += ["--settle", str(args.settle), "--idle-seconds", "0"]
        ran = subprocess.run(bench, cwd=REPO, capture_output=True, text=True, timeout=1800)
        used = sum(cpu_seconds(p.pid) or 0.0 for p in procs) - before
        if ran.returncode:
            raise SystemExit(f"bench.bridge failed for {name}:\n{ran.stderr[-3000:]}")
        burst = json.loads(ran.stdout)["bridge_burst"]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    texts = [p.read_text() for p in paths]
    each = list(burst.get("per_second_each") or [burst["per_second"]])
    return {
        "replicas": replicas,
        "relay": relay,
        "bursts_per_second": each,
        "median_per_second": statistics.median(each),
        "replicas_cpu_ms_per_pod": round(used * 1000 / (args.pods * args.bursts), 1),
        "relayed_submits": sum(len(re.findall(r"submit relay: submitted for", t)) for t in texts),
        "submitted_by_followers_themselves": sum(t.count("submitting here") for t in texts),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--settle", type=float, default=32.0, help="seconds for the replicas' node caches")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    if set(names) - set(CONFIGS):
        raise SystemExit(f"--configs: unknown {sorted(set(names) - set(CONFIGS))}")
    progress = Progress("bench.replicas")
    pid_file = stack.STATE / "pids" / "bridge-worker.pid"
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        try:
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
            time.sleep(3)
            for name in names:
                results[name] = run_config(name, args, Path(tmp), progress)
                progress.phase(f"{name}: {results[name]['bursts_per_second']} pods/s")
        finally:
            progress.phase("starting the stack's bridge worker again")
            subprocess.run([sys.executable, "-m", "slinky.cli", "dev", "up"], cwd=REPO, capture_output=True)
    if "one" in results:
        one = results["one"]["median_per_second"]
        for name in names:
            results[name]["median_vs_one"] = round(results[name]["median_per_second"] / one, 2)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'configuration':12} {'bursts, pods/s':>24} {'median':>7} {'vs one':>7} {'CPU ms/pod':>11} {'relayed':>8}")
    for name, r in results.items():
        bursts = " / ".join(f"{x:.1f}" for x in r["bursts_per_second"])
        print(
            f"{name:12} {bursts:>24} {r['median_per_second']:>7.1f} {r.get('median_vs_one', ''):>7} "
            f"{r['replicas_cpu_ms_per_pod']:>11} {r['relayed_submits']:>8}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
