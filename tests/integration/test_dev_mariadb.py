"""The dev stack's MariaDB, as its users see it: the env file's host, port, user and password file, over TCP."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def sql(dev_env: dict[str, str], statements: str) -> str:
    """Run SQL with the `mariadb` client as the stack's user at SLINKY_DEV_MARIADB_HOST:PORT (TCP, no socket)."""
    client = shutil.which("mariadb")
    assert client is not None, "the mariadb client is installed by `slinky dev up`"
    password = Path(dev_env["SLINKY_DEV_MARIADB_PASSWORD_FILE"]).read_text().strip()
    proc = subprocess.run(
        [
            client,
            "--no-defaults",
            "--protocol=TCP",
            f"--host={dev_env['SLINKY_DEV_MARIADB_HOST']}",
            f"--port={dev_env['SLINKY_DEV_MARIADB_PORT']}",
            f"--user={dev_env['SLINKY_DEV_MARIADB_USER']}",
            "--connect-timeout=5",
            "--batch",
            "--skip-column-names",
        ],
        input=statements,
        env={**os.environ, "MYSQL_PWD": password},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_env_file_names_mariadb_and_its_password_file_is_private(dev_env: dict[str, str]) -> None:
    from slinky.dev import real_nodes

    assert dev_env["SLINKY_DEV_MARIADB_HOST"] == real_nodes.HOST_ADDRESS
    assert int(dev_env["SLINKY_DEV_MARIADB_PORT"]) > 0
    password_file = Path(dev_env["SLINKY_DEV_MARIADB_PASSWORD_FILE"])
    assert password_file.is_absolute() and password_file.stat().st_mode & 0o777 == 0o600


def test_the_stack_user_creates_a_database_writes_reads_and_drops_it(dev_env: dict[str, str]) -> None:
    db = f"slinky_test_{uuid.uuid4().hex[:8]}"
    try:
        sql(
            dev_env,
            f"CREATE DATABASE {db};\n"
            f"CREATE TABLE {db}.jobs (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL) ENGINE=InnoDB;\n"
            f"INSERT INTO {db}.jobs VALUES (42, 'hello');\n",
        )
        assert sql(dev_env, f"SELECT id, name FROM {db}.jobs;\n").splitlines() == ["42\thello"]
    finally:
        sql(dev_env, f"DROP DATABASE IF EXISTS {db};\n")
    assert db not in sql(dev_env, "SHOW DATABASES;\n").split()


def test_the_stack_user_may_grant(dev_env: dict[str, str]) -> None:
    grants = sql(dev_env, "SHOW GRANTS FOR CURRENT_USER();\n")
    assert "GRANT ALL PRIVILEGES ON *.* TO `slinky`@`%`" in grants and "WITH GRANT OPTION" in grants
