"""slurm.conf, cgroup.conf and slurmdbd.conf of a managed cluster: upstream's keys and order, and no user
string that adds a line or a key."""

from __future__ import annotations

from typing import Any

import pytest

from slinky.operator import slurmconf
from slinky.operator.api.accounting import Accounting
from slinky.operator.api.controller import Controller
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.slurmconf import (
    ConfError,
    ConfFiles,
    ConfProblem,
    cluster_name,
    config_hash,
    default_cgroup_conf,
    slurm_conf,
    slurmdbd_conf,
    validate,
    validate_accounting,
    wants_default_cgroup_conf,
)

NO_FILES = ConfFiles()


def controller(spec: dict[str, Any] | None = None, name: str = "slurm", namespace: str = "hpc") -> Controller:
    base = {"slurmKeyRef": {"name": "keys", "key": "slurm.key"}, "jwtKeyRef": {"name": "keys", "key": "jwt.key"}}
    return Controller.model_validate(
        {"metadata": {"name": name, "namespace": namespace}, "spec": {**base, **(spec or {})}}
    )


def nodeset(name: str, **spec: Any) -> NodeSet:
    return NodeSet.model_validate(
        {"metadata": {"name": name, "namespace": "hpc"}, "spec": {"controllerRef": {"name": "slurm"}, **spec}}
    )


def accounting(spec: dict[str, Any] | None = None, name: str = "acct") -> Accounting:
    base = {"storageConfig": {"host": "mariadb", "username": "slurm", "passwordKeyRef": {"name": "db", "key": "pw"}}}
    return Accounting.model_validate({"metadata": {"name": name, "namespace": "hpc"}, "spec": {**base, **(spec or {})}})


def lines(text: str) -> list[str]:
    return text.splitlines()


def fields(problems: list[ConfProblem]) -> list[tuple[str, str, str]]:
    return [(p.kind, p.name, p.field) for p in problems]


# ClusterName


def test_cluster_name_defaults_to_namespace_underscore_name() -> None:
    assert cluster_name(controller()) == "hpc_slurm"
    assert cluster_name(controller({"clusterName": "linux"})) == "linux"
    assert "ClusterName=hpc_slurm" in lines(slurm_conf(controller(), [], None, NO_FILES))


# The whole file


def full_conf() -> str:
    ctl = controller({"accountingRef": {"name": "acct"}, "extraConf": "MinJobAge=2\nSchedulerType=sched/backfill"})
    nodesets = [
        nodeset("zeta"),
        nodeset("alpha", partition={"enabled": True, "config": "MaxTime=UNLIMITED State=UP"}),
    ]
    files = ConfFiles(
        config=("gres.conf",),
        prolog=("90-b.sh", "00-a.sh"),
        epilog=("00-e.sh",),
        prolog_slurmctld=("p.sh",),
        epilog_slurmctld=("e.sh",),
    )
    return slurm_conf(ctl, nodesets, accounting(), files)


def test_full_conf_is_upstreams_lines_in_upstreams_order() -> None:
    assert lines(full_conf()) == [
        "#",
        "### GENERAL ###",
        "ClusterName=hpc_slurm",
        "SlurmUser=slurm",
        "SlurmctldHost=slurm-controller-0(slurm-controller-0.slurm-controller-internal.hpc)",
        "SlurmctldPort=6817",
        "SlurmctldAddr=slurm-controller.hpc",
        "StateSaveLocation=/var/spool/slurmctld/hpc_slurm",
        "SlurmdUser=root",
        "SlurmdPort=6818",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "MaxNodeCount=1024",
        "#",
        "### LOGGING ###",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmSchedLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "#",
        "### PLUGINS & PARAMETERS ###",
        "AuthType=auth/slurm",
        "CredType=cred/slurm",
        "AuthAltTypes=auth/jwt",
        "AuthAltParameters=jwt_key=/etc/slurm/jwt.key",
        "AuthInfo=use_client_ids",
        "SlurmctldParameters=enable_configless,reconfig_on_restart",
        "#",
        "### ACCOUNTING ###",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=acct-accounting",
        "AccountingStoragePort=6819",
        "#",
        "### SLURMCTLD PROLOG & EPILOG ###",
        "PrologSlurmctld=/etc/slurm/p.sh",
        "EpilogSlurmctld=/etc/slurm/e.sh",
        "#",
        "### PROLOG & EPILOG ###",
        "Prolog=00-a.sh",
        "Prolog=90-b.sh",
        "Epilog=00-e.sh",
        "#",
        "### NODESET & PARTITION ###",
        "NodeSet=alpha Feature=alpha",
        "PartitionName=alpha Nodes=alpha MaxTime=UNLIMITED State=UP",
        "NodeSet=zeta Feature=zeta",
        "#",
        "### EXTRA CONFIG ###",
        "MinJobAge=2",
        "SchedulerType=sched/backfill",
    ]
    assert full_conf().endswith("SchedulerType=sched/backfill\n")


def test_output_does_not_depend_on_input_order() -> None:
    ctl = controller()
    a, b = nodeset("a"), nodeset("b", partition={"enabled": True})
    one = slurm_conf(ctl, [a, b], None, ConfFiles(prolog=("x.sh", "a.sh")))
    other = slurm_conf(ctl, [b, a], None, ConfFiles(prolog=("a.sh", "x.sh")))
    assert one == other
    assert ConfFiles(prolog=("x.sh", "a.sh")) == ConfFiles(prolog=("a.sh", "x.sh"))


def test_without_accounting_or_files_the_optional_sections_are_left_out() -> None:
    text = slurm_conf(controller(), [], None, NO_FILES)
    assert "AccountingStorageType=accounting_storage/none" in lines(text)
    assert "AccountingStorageHost" not in text
    for absent in ("PROLOG", "NODESET", "EXTRA CONFIG", "MERGED", "MetricsType"):
        assert absent not in text


def test_high_availability_lists_every_slurmctld() -> None:
    text = slurm_conf(controller({"ha": {"enabled": True, "backups": 2}}), [], None, NO_FILES)
    hosts = [line for line in lines(text) if line.startswith("SlurmctldHost=")]
    assert hosts == [
        f"SlurmctldHost=slurm-controller-{i}(slurm-controller-{i}.slurm-controller-internal.hpc)" for i in range(3)
    ]


def test_jwks_and_metrics_add_their_lines() -> None:
    ctl = controller({"jwksKeyRef": {"name": "jwks", "key": "jwks.json"}, "metrics": {"enabled": True}})
    text = lines(slurm_conf(ctl, [], None, NO_FILES))
    assert "AuthAltParameters=jwt_key=/etc/slurm/jwt.key,jwks=/etc/slurm/jwks.json" in text
    assert "MetricsType=metrics/openmetrics" in text


def test_external_accounting_is_reached_at_its_external_address() -> None:
    acct = accounting({"external": True, "externalConfig": {"host": "dbd.example.org", "port": 7031}})
    text = lines(slurm_conf(controller({"accountingRef": {"name": "acct"}}), [], acct, NO_FILES))
    assert "AccountingStorageHost=dbd.example.org" in text
    assert "AccountingStoragePort=7031" in text


def test_nodeset_name_is_the_hostname_prefix_as_upstream() -> None:
    ns = nodeset("slurm-gpu", template={"spec": {"hostname": "gpu-"}}, partition={"enabled": True})
    text = lines(slurm_conf(controller(), [ns], None, NO_FILES))
    assert "NodeSet=gpu Feature=gpu" in text
    assert "PartitionName=gpu Nodes=gpu" in text


# extraConf


def test_extra_conf_comes_after_everything_the_operator_writes() -> None:
    extra = "# site tuning\n\nPartitionName=debug Nodes=ALL Default=YES\tMaxTime=30 # short\nMinJobAge=2"
    ns = nodeset("a", partition={"enabled": True})
    text = slurm_conf(controller({"extraConf": extra + "\n"}), [ns], None, ConfFiles(prolog=("p.sh",)))
    assert text.endswith("### EXTRA CONFIG ###\n" + extra + "\n")
    assert text.index("PartitionName=a") < text.index("PartitionName=debug")


def test_option_list_keys_in_extra_conf_are_merged_after_it() -> None:
    extra = (
        "SlurmctldParameters=idle_on_node_suspend,enable_configless\n"
        "AuthAltParameters=jwt_key=/tmp/evil,disable_token_creation"
    )
    text = lines(slurm_conf(controller({"extraConf": extra}), [], None, NO_FILES))
    merged = text[text.index("### MERGED CONFIG ###") + 1 :]
    assert merged == [
        "AuthAltParameters=disable_token_creation,jwt_key=/etc/slurm/jwt.key",
        "SlurmctldParameters=enable_configless,idle_on_node_suspend,reconfig_on_restart",
    ]


@pytest.mark.parametrize(
    "extra",
    [
        "MinJobAge=2\nAuthType=auth/none",
        "MinJobAge=2\nauthtype=auth/none",
        "MinJobAge=2\rAuthType=auth/none",
        "MinJobAge=2 AuthType=auth/none",
        "MinJobAge=2\\\nAuthType=auth/none",
    ],
)
def test_extra_conf_cannot_set_an_operator_key(extra: str) -> None:
    problems = validate(controller({"extraConf": extra}), [], None)
    assert problems and all(p.field == "spec.extraConf" for p in problems)
    with pytest.raises(ConfError) as err:
        slurm_conf(controller({"extraConf": extra}), [], None, NO_FILES)
    assert err.value.problems == tuple(problems)


def test_a_carriage_return_is_named() -> None:
    [problem] = validate(controller({"extraConf": "MinJobAge=2\rAuthType=auth/none"}), [], None)
    assert problem.message == "line 1: contains a control character (U+000D); only tabs are allowed"


def test_owned_key_problem_names_the_key_and_line() -> None:
    [problem] = validate(controller({"extraConf": "MinJobAge=2\n\nSlurmctldHost=evil"}), [], None)
    assert (problem.kind, problem.name, problem.field) == ("Controller", "slurm", "spec.extraConf")
    assert "line 3" in problem.message and "SlurmctldHost" in problem.message


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        ("MinJobAge=2\nInclude /etc/evil.conf", 2),
        ("MinJobAge", 1),
        ("MinJobAge=", 1),
        ("A=1\nB=2\nMinJobAge = 2", 3),
        ('Reason="a # b"', 1),
        ("Prolog=/etc/a\\#b", 1),
        ("MinJobAge=2\x00", 1),
    ],
)
def test_extra_conf_lines_must_be_key_value_items(extra: str, line: int) -> None:
    [problem] = validate(controller({"extraConf": extra}), [], None)
    assert problem.field == "spec.extraConf" and problem.message.startswith(f"line {line}:")


def test_quoted_values_and_comments_are_accepted() -> None:
    extra = '# comment\nNodeName=n1 Reason="being fixed" State=DOWN # trailing\nMaxNodeCount=5000'
    assert validate(controller({"extraConf": extra}), [], None) == []


def test_every_owned_key_is_refused() -> None:
    for key in sorted(slurmconf.SLURM_CONF_OWNED_KEYS):
        problems = validate(controller({"extraConf": f"{key}=x"}), [], None)
        assert [p.field for p in problems] == ["spec.extraConf"], key
        assert key in problems[0].message


# The other rules, each naming its object and field


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"clusterName": "a" * 41}, "spec.clusterName"),
        ({"clusterName": "Linux"}, "spec.clusterName"),
        ({"clusterName": "my.cluster"}, "spec.clusterName"),
        ({"clusterName": "a\nAuthType=auth/none"}, "spec.clusterName"),
        ({"external": True, "externalConfig": {"host": "ctl", "port": 6817}}, "spec.external"),
    ],
)
def test_controller_rules(spec: dict[str, Any], field: str) -> None:
    problems = validate(controller(spec), [], None)
    assert fields(problems) == [("Controller", "slurm", field)]
    with pytest.raises(ConfError):
        slurm_conf(controller(spec), [], None, NO_FILES)


def test_cluster_name_limit_is_forty_characters() -> None:
    assert validate(controller({"clusterName": "a" * 40}), [], None) == []


def test_a_too_long_default_cluster_name_says_to_set_cluster_name() -> None:
    [problem] = validate(controller(name="n" * 30, namespace="space" * 3), [], None)
    assert problem.field == "spec.clusterName" and "set clusterName" in problem.message


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("MaxTime=1\nAuthType=auth/none", "single line"),
        ("MaxTime=1\rAuthType=auth/none", "single line"),
        ("MaxTime=1 # Default=YES", "'#'"),
        ("MaxTime", "Key=Value"),
        ("Nodes=ALL", "Nodes is set by the operator"),
    ],
)
def test_partition_config_rules(config: str, message: str) -> None:
    ns = nodeset("cpu", partition={"enabled": True, "config": config})
    [problem] = validate(controller(), [ns], None)
    assert (problem.kind, problem.name, problem.field) == ("NodeSet", "cpu", "spec.partition.config")
    assert message in problem.message
    with pytest.raises(ConfError):
        slurm_conf(controller(), [ns], None, NO_FILES)


@pytest.mark.parametrize(
    ("ns", "field"),
    [
        (nodeset("cpu#1"), "metadata.name"),
        (nodeset("cpu\nAuthType=auth/none"), "metadata.name"),
        (nodeset("cpu", template={"spec": {"hostname": "g#pu-"}}), "spec.template.spec.hostname"),
        (nodeset("cpu", controllerRef={"name": "other"}), "spec.controllerRef.name"),
    ],
)
def test_nodeset_rules(ns: NodeSet, field: str) -> None:
    assert fields(validate(controller(), [ns], None)) == [("NodeSet", str(ns.metadata["name"]), field)]


def test_two_nodesets_with_one_slurm_name_are_refused() -> None:
    a = nodeset("a", template={"spec": {"hostname": "gpu-"}})
    b = nodeset("b", template={"spec": {"hostname": "gpu-"}})
    assert fields(validate(controller(), [a, b], None)) == [("NodeSet", "b", "spec.template.spec.hostname")]


def test_file_names_must_be_plain_and_unique() -> None:
    files = ConfFiles(config=("slurm.conf",), prolog=("a b.sh",), epilog=("x.sh", "x.sh"))
    assert sorted(p.field for p in validate(controller(), [], None, files)) == [
        "spec.configFileRefs",
        "spec.epilogScriptRefs",
        "spec.prologScriptRefs",
    ]


def test_accounting_must_be_the_referenced_one_and_reachable() -> None:
    acct = accounting()
    assert fields(validate(controller(), [], acct)) == [("Controller", "slurm", "spec.accountingRef")]
    bad = accounting({"external": True, "externalConfig": {"host": "db\nAuthType=auth/none", "port": 0}})
    assert fields(validate(controller({"accountingRef": {"name": "acct"}}), [], bad)) == [
        ("Accounting", "acct", "spec.externalConfig.host"),
        ("Accounting", "acct", "spec.externalConfig.port"),
    ]


# cgroup.conf and the hash


def test_default_cgroup_conf_is_upstreams_and_only_wanted_without_a_users() -> None:
    assert default_cgroup_conf() == "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n"
    assert wants_default_cgroup_conf(ConfFiles(config=("gres.conf",)))
    assert not wants_default_cgroup_conf(ConfFiles(config=("cgroup.conf", "gres.conf")))


def test_config_hash_is_stable_and_sensitive() -> None:
    files = {"slurm.conf": "ClusterName=a\n", "cgroup.conf": "CgroupPlugin=disabled\n"}
    digest = config_hash(files)
    assert digest == config_hash(dict(reversed(list(files.items()))))
    assert len(digest) == 16 and int(digest, 16) >= 0
    assert config_hash({**files, "slurm.conf": "ClusterName=b\n"}) != digest
    assert config_hash({"slurm.conf.bak": "ClusterName=a\n", "cgroup.conf": files["cgroup.conf"]}) != digest
    assert config_hash({"a": "bc"}) != config_hash({"ab": "c"})


# slurmdbd.conf


def test_slurmdbd_conf_from_storage_config() -> None:
    acct = accounting(
        {
            "storageConfig": {
                "host": "mariadb.db",
                "port": 3307,
                "database": "acct_db",
                "username": "dbd",
                "passwordKeyRef": {"name": "db", "key": "pw"},
            },
            "extraConf": "CommitDelay=1",
        }
    )
    assert lines(slurmdbd_conf(acct, "s3cret")) == [
        "#",
        "### GENERAL ###",
        "DbdHost=acct-accounting-0",
        "DbdPort=6819",
        "SlurmUser=slurm",
        "#",
        "### PLUGINS & PARAMETERS ###",
        "AuthType=auth/slurm",
        "AuthAltTypes=auth/jwt",
        "AuthAltParameters=jwt_key=/etc/slurm/jwt.key",
        "AuthInfo=use_client_ids",
        "#",
        "### STORAGE ###",
        "StorageType=accounting_storage/mysql",
        "StorageHost=mariadb.db",
        "StoragePort=3307",
        "StorageUser=dbd",
        "StorageLoc=acct_db",
        "StoragePass=s3cret",
        "#",
        "### LOGGING ###",
        "LogFile=/dev/null",
        "#",
        "### EXTRA CONFIG ###",
        "CommitDelay=1",
    ]


def test_slurmdbd_conf_storage_defaults() -> None:
    text = lines(slurmdbd_conf(accounting(), "pw"))
    assert "StoragePort=3306" in text and "StorageLoc=slurm_acct_db" in text


@pytest.mark.parametrize(
    ("password", "written"),
    [
        ("a#b", "StoragePass=a\\#b"),
        ("a\\", "StoragePass=a\\\\"),
        ("two words", 'StoragePass="two words"'),
        ('q"uote', 'StoragePass=q"uote'),
    ],
)
def test_password_is_escaped_so_slurm_reads_it_back(password: str, written: str) -> None:
    assert written in lines(slurmdbd_conf(accounting(), password))


@pytest.mark.parametrize("password", ["pw\nAuthType=auth/none", "pw\r", 'a "b"', '"quoted"'])
def test_password_slurm_cannot_read_is_refused_without_echoing_it(password: str) -> None:
    [problem] = validate_accounting(accounting(), password)
    assert problem.field == "spec.storageConfig.passwordKeyRef" and password not in problem.message
    with pytest.raises(ConfError):
        slurmdbd_conf(accounting(), password)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"storageConfig": {"host": "db\nAuthType=auth/none"}}, "spec.storageConfig.host"),
        ({"storageConfig": {}}, "spec.storageConfig.host"),
        ({"storageConfig": {"host": "db", "database": "acct#x"}}, "spec.storageConfig.database"),
        ({"storageConfig": {"host": "db", "username": "u\nStorageType=x"}}, "spec.storageConfig.username"),
        ({"storageConfig": {"host": "db", "port": 70000}}, "spec.storageConfig.port"),
        ({"extraConf": "CommitDelay=1\nStoragePass=other"}, "spec.extraConf"),
        ({"extraConf": "CommitDelay=1\nauthtype=auth/none"}, "spec.extraConf"),
        ({"external": True, "externalConfig": {"host": "dbd", "port": 6819}}, "spec.external"),
    ],
)
def test_slurmdbd_rules(spec: dict[str, Any], field: str) -> None:
    assert fields(validate_accounting(accounting(spec), "pw")) == [("Accounting", "acct", field)]
    with pytest.raises(ConfError):
        slurmdbd_conf(accounting(spec), "pw")


def test_slurmdbd_merges_auth_options_after_extra_conf() -> None:
    acct = accounting({"extraConf": "AuthInfo=ttl=60", "jwksKeyRef": {"name": "j", "key": "jwks.json"}})
    text = lines(slurmdbd_conf(acct, "pw"))
    assert "AuthAltParameters=jwt_key=/etc/slurm/jwt.key,jwks=/etc/slurm/jwks.json" in text
    assert text[-3:] == ["#", "### MERGED CONFIG ###", "AuthInfo=ttl=60,use_client_ids"]


def test_conf_error_is_a_value_error_listing_the_problems() -> None:
    with pytest.raises(ValueError, match=r"Controller/slurm: spec.clusterName"):
        slurm_conf(controller({"clusterName": "UPPER"}), [], None, NO_FILES)
