"""The dev stack's MariaDB: arguments, the user's SQL, the env keys, the port plan, the install guard."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slinky.dev import real_nodes, stack
from slinky.dev import webhook as dev_webhook


def argv(*, snapshot_isolation_off: bool) -> list[str]:
    return stack.mariadbd_argv(
        "/usr/sbin/mariadbd",
        Path("/s/mariadb/data"),
        Path("/s/mariadb/mariadbd.sock"),
        Path("/s/mariadb/mariadbd.pid"),
        port=13306,
        bind="127.0.0.1,10.226.24.1",
        snapshot_isolation_off=snapshot_isolation_off,
    )


def test_mariadbd_argv_reads_no_option_file_and_uses_our_paths() -> None:
    got = argv(snapshot_isolation_off=False)
    assert got[:2] == ["/usr/sbin/mariadbd", "--no-defaults"]  # --no-defaults is only honoured first
    assert "--datadir=/s/mariadb/data" in got
    assert "--socket=/s/mariadb/mariadbd.sock" in got
    assert "--pid-file=/s/mariadb/mariadbd.pid" in got
    assert "--port=13306" in got
    assert "--bind-address=127.0.0.1,10.226.24.1" in got
    assert "--user=root" in got and "--skip-name-resolve" in got
    assert not any("snapshot" in a for a in got)


def test_mariadbd_argv_turns_snapshot_isolation_off_only_when_asked() -> None:
    assert argv(snapshot_isolation_off=True)[-1] == "--innodb-snapshot-isolation=OFF"


def test_bind_address_is_loopback_and_the_pods_bridge() -> None:
    assert stack.mariadb_bind_address().split(",") == ["127.0.0.1", real_nodes.HOST_ADDRESS]


def test_install_db_argv() -> None:
    got = stack.mariadb_install_db_argv("/usr/bin/mariadb-install-db", Path("/s/mariadb/data.init"))
    assert got[:2] == ["/usr/bin/mariadb-install-db", "--no-defaults"]
    assert "--datadir=/s/mariadb/data.init" in got
    assert "--user=root" in got and "--auth-root-authentication-method=socket" in got


def test_user_sql_is_idempotent_and_grants_everything() -> None:
    sql = stack.mariadb_user_sql("slinky", "ab12")
    assert sql.splitlines() == [
        "CREATE USER IF NOT EXISTS 'slinky'@'%' IDENTIFIED BY 'ab12';",
        "ALTER USER 'slinky'@'%' IDENTIFIED BY 'ab12';",
        "GRANT ALL PRIVILEGES ON *.* TO 'slinky'@'%' WITH GRANT OPTION;",
    ]


@pytest.mark.parametrize(("user", "password"), [("slinky", "a'b"), ("sl;inky", "ab"), ("slinky", ""), ("x y", "ab")])
def test_user_sql_refuses_what_would_need_quoting(user: str, password: str) -> None:
    with pytest.raises(ValueError):
        stack.mariadb_user_sql(user, password)


def test_env_values_hold_the_mariadb_keys() -> None:
    env = stack.mariadb_env_values(Path("/s"))
    assert env == {
        "SLINKY_DEV_MARIADB_HOST": real_nodes.HOST_ADDRESS,
        "SLINKY_DEV_MARIADB_PORT": str(stack.PORTS.mariadb),
        "SLINKY_DEV_MARIADB_USER": "slinky",
        "SLINKY_DEV_MARIADB_PASSWORD_FILE": "/s/mariadb/password",
    }
    assert stack.env_values().items() >= stack.mariadb_env_values(stack.STATE).items()


def test_port_plan_has_no_collision() -> None:
    ports = list(dataclasses.asdict(stack.PORTS).values())
    ports += [stack.PORTS.bridge_metrics + 1, dev_webhook.PORT]  # the Temporal SDK's metrics; the webhook
    assert len(ports) == len(set(ports))
    assert stack.PORTS.mariadb != 3306  # away from the default, like every port of the stack


def test_mariadbd_accepts_reads_the_variables_table(tmp_path: Path) -> None:
    fake = tmp_path / "mariadbd"
    fake.write_text(
        "#!/bin/sh\ncat <<'EOF'\n  --innodb-snapshot-isolation \n                      Use snapshot isolation\n"
        "Variables (--variable-name=value)\ninnodb-snapshot-isolation                                    FALSE\n"
        "port                                                         3306\nEOF\n"
    )
    fake.chmod(0o755)
    assert stack._mariadbd_accepts(str(fake), "innodb-snapshot-isolation")
    assert not stack._mariadbd_accepts(str(fake), "innodb-snapshot")
    assert not stack._mariadbd_accepts(str(fake), "bind-address")


def test_services_held_creates_and_removes_its_own_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = tmp_path / "policy-rc.d"
    monkeypatch.setattr(stack, "POLICY_RC_D", policy)
    with stack._services_held():
        assert policy.read_text().rstrip().endswith("exit 101")
        assert policy.stat().st_mode & 0o111
    assert not policy.exists()


def test_services_held_leaves_an_existing_policy_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 0\n")
    monkeypatch.setattr(stack, "POLICY_RC_D", policy)
    with stack._services_held():
        assert policy.read_text() == "#!/bin/sh\nexit 0\n"
    assert policy.read_text() == "#!/bin/sh\nexit 0\n"


def test_services_held_removes_its_policy_when_the_install_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = tmp_path / "policy-rc.d"
    monkeypatch.setattr(stack, "POLICY_RC_D", policy)
    with pytest.raises(RuntimeError), stack._services_held():
        raise RuntimeError("apt-get died")
    assert not policy.exists()


def test_mariadb_is_a_component_started_before_the_slurm_daemons() -> None:
    order = list(stack.COMPONENTS)
    assert order.index("mariadb") < order.index("slurmctld")


def test_first_mariadb_error_is_the_cause_not_the_final_abort() -> None:
    text = (
        "2026-11-25 18:39:25 0 [Note] Starting MariaDB 10.11.19\n"
        "2026-11-25 18:39:25 0 [ERROR] Can't start server: Bind on TCP/IP port. Got error: 98\n"
        "2026-11-25 18:39:25 0 [ERROR] Aborting\n"
    )
    assert (
        stack.first_mariadb_error(text)
        == "2026-11-25 18:39:25 0 [ERROR] Can't start server: Bind on TCP/IP port. Got error: 98"
    )
    assert stack.first_mariadb_error("[Note] ready for connections.\n") is None
