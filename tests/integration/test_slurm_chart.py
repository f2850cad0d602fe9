"""The `slurm` chart (deploy/charts/slurm): a Slurm cluster as custom resources, with upstream's value keys.

Offline, with the real Helm v4 engine (helm-python-sdk): what upstream's quick-start values render (every custom
resource read back through the operator's own models), `nodesetDefaults`/`loginsetDefaults` merged under each
entry, the `partitions` map, the key Secrets made unless given, the files' ConfigMaps, and the values schema's
message for bad values. Live: `helm install` of the quick start into a namespace whose pods go to the real nodes,
with an operator for that namespace: the NodeSet's node IDLE in `sinfo` from the login pod and a job COMPLETED;
`helm upgrade` with a new `extraConf` reaches slurmctld through ControllerReconfigure; `helm uninstall` leaves no
pod and no custom resource.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from slinky.operator import admission
from slinky.operator.api.controller import Controller
from slinky.operator.api.loginset import LoginSet
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.api.restapi import RestApi
from slinky.operator.validation import nodeset_problems
from tests.integration.charts import assert_valid_for_1_20
from tests.integration.operator_fixtures import (
    GROUP,
    VERSION,
    end_workflows_of,
    start_operator,
    stop_operator,
    wait_for,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "charts" / "slurm"
SLURMCTLD_METRICS = ("jobs", "nodes", "partitions", "scheduler")
QUICK_START: dict[str, Any] = {
    "nodesets": {"slinky": {}},
    "loginsets": {"slinky": {}},
    "partitions": {"all": {"enabled": True}},
}
"""Upstream's quick start (`nodesets={"slinky":{}}`, `partitions.all.enabled=true`) and a login pod."""

Obj = dict[str, Any]


def render(values: dict[str, Any], *, name: str = "slurm", namespace: str = "hpc") -> dict[tuple[str, str], Obj]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name=name, namespace=namespace)
    docs = [d for path, text in manifests.items() if not path.endswith("NOTES.txt") for d in yaml.safe_load_all(text)]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d}


SCHEMA_WARNING = "ignore:The metaschema specified by .schema was not found:DeprecationWarning"


@pytest.mark.filterwarnings(SCHEMA_WARNING)
def test_the_quick_start_renders_a_cluster_the_operator_takes() -> None:
    objs = render(QUICK_START)
    assert sorted(objs) == [
        ("Controller", "slurm"),
        ("LoginSet", "slurm-login-slinky"),
        ("NodeSet", "slurm-worker-slinky"),
        ("RestApi", "slurm"),
        ("Secret", "slurm-auth-jwt"),
        ("Secret", "slurm-auth-slurm"),
        ("Secret", "slurm-sssd-conf"),
    ]
    assert all(o["metadata"]["namespace"] == "hpc" for o in objs.values())
    assert_valid_for_1_20([o for (kind, _), o in objs.items() if kind == "Secret"])
    controller = Controller.model_validate(objs[("Controller", "slurm")])
    assert controller.spec.extra_conf == "PartitionName=all Nodes=ALL Default=YES MaxTime=UNLIMITED State=UP"
    assert controller.spec.slurm_key_ref is not None and controller.spec.slurm_key_ref.name == "slurm-auth-slurm"
    assert controller.spec.slurmctld["image"] == "ghcr.io/slinkyproject/slurmctld:26.05-ubuntu26.04"
    nodeset = NodeSet.model_validate(objs[("NodeSet", "slurm-worker-slinky")])
    assert nodeset_problems(nodeset) == [], "the operator reconciles it as it is"
    assert nodeset.spec.controller_ref.name == "slurm" and nodeset.spec.replicas == 1
    assert (nodeset.spec.template.spec or {})["hostname"] == "slinky-", "Slurm node names slinky-<ordinal>"
    login = LoginSet.model_validate(objs[("LoginSet", "slurm-login-slinky")])
    assert login.spec.sssd_conf_ref is not None and login.spec.sssd_conf_ref.name == "slurm-sssd-conf"
    RestApi.model_validate(objs[("RestApi", "slurm")])
    for (kind, _), o in objs.items():  # the operator's validating webhook lets every object in
        assert admission.review(kind, "CREATE", None, o) == [], kind
    keys = objs[("Secret", "slurm-auth-slurm")]["data"]["slurm.key"], objs[("Secret", "slurm-auth-jwt")]["data"]
    assert len(base64.b64decode(keys[0])) == 1024 and len(base64.b64decode(keys[1]["jwt.key"])) == 64


def test_nothing_but_the_control_plane_without_nodesets_and_no_partition_by_default() -> None:
    """As upstream since 1.2: no default NodeSet, LoginSet or `all` partition."""
    objs = render({})
    assert {k for k, _ in objs} == {"Controller", "RestApi", "Secret"}
    assert "extraConf" not in objs[("Controller", "slurm")]["spec"]


def test_defaults_merge_under_each_entry_and_an_entry_wins() -> None:
    objs = render(
        {
            "nodesetDefaults": {"replicas": 3, "slurmd": {"resources": {"limits": {"cpu": "2"}}}},
            "nodesets": {
                "cpu": {},
                "gpu": {"replicas": 1, "extraConfMap": {"Gres": ["gpu:2"], "Weight": 5}},
                "off": {"enabled": False},
            },
            "loginsetDefaults": {"replicas": 2},
            "loginsets": {"a": {}, "b": {"replicas": 1}},
        }
    )
    cpu, gpu = objs[("NodeSet", "slurm-worker-cpu")]["spec"], objs[("NodeSet", "slurm-worker-gpu")]["spec"]
    assert cpu["replicas"] == 3 and cpu["slurmd"]["resources"] == {"limits": {"cpu": "2"}}
    assert gpu["replicas"] == 1 and gpu["slurmd"]["resources"] == {"limits": {"cpu": "2"}}
    assert gpu["extraConf"] == "Gres=gpu:2 Weight=5" and "extraConf" not in cpu
    assert ("NodeSet", "slurm-worker-off") not in objs, "enabled: false leaves an entry out"
    assert objs[("LoginSet", "slurm-login-a")]["spec"]["replicas"] == 2
    assert objs[("LoginSet", "slurm-login-b")]["spec"]["replicas"] == 1


@pytest.mark.filterwarnings(SCHEMA_WARNING)
def test_partitions_extra_conf_and_files() -> None:
    objs = render(
        {
            "nodesets": {"cpu": {"partition": {"configMap": {"MaxTime": "1:00:00"}}}, "gpu": {}},
            "partitions": {
                "all": {"enabled": True},
                "both": {"enabled": True, "nodesets": ["cpu", "gpu"], "config": "State=UP"},
            },
            "controller": {"extraConf": "MaxJobCount=5000\nMinJobAge=30", "extraConfMap": {"Ignored": 1}},
            "configFiles": {"gres.conf": "AutoDetect=off\n"},
            "prologScripts": {"00-hello.sh": "#!/bin/sh\nexit 0\n"},
        }
    )
    spec = objs[("Controller", "slurm")]["spec"]
    assert spec["extraConf"].splitlines() == [
        "PartitionName=all Nodes=ALL Default=YES MaxTime=UNLIMITED State=UP",
        "PartitionName=both Nodes=cpu,gpu State=UP",
        "MaxJobCount=5000",
        "MinJobAge=30",
    ], "extraConf wins over extraConfMap, as upstream"
    assert objs[("NodeSet", "slurm-worker-cpu")]["spec"]["partition"] == {"enabled": True, "config": "MaxTime=1:00:00"}
    assert spec["configFileRefs"] == [{"name": "slurm-config-files"}]
    assert spec["prologScriptRefs"] == [{"name": "slurm-prolog-files"}]
    assert objs[("ConfigMap", "slurm-config-files")]["data"] == {"gres.conf": "AutoDetect=off\n"}
    assert_valid_for_1_20([objs[("ConfigMap", "slurm-config-files")], objs[("ConfigMap", "slurm-prolog-files")]])


def test_given_secrets_are_referenced_not_made_and_accounting_is_optional() -> None:
    objs = render(
        {
            "slurmKey": {"secretRef": {"name": "mine", "key": "k"}},
            "jwtKey": {"secretRef": {"name": "jwt", "key": "j"}},
            "accounting": {"enabled": True, "storageConfig": {"host": "db.example.org"}},
        }
    )
    assert ("Secret", "slurm-auth-slurm") not in objs and ("Secret", "slurm-auth-jwt") not in objs
    spec = objs[("Controller", "slurm")]["spec"]
    assert spec["slurmKeyRef"] == {"name": "mine", "key": "k"} and spec["jwtKeyRef"] == {"name": "jwt", "key": "j"}
    assert spec["accountingRef"] == {"name": "slurm"}
    storage = objs[("Accounting", "slurm")]["spec"]["storageConfig"]
    assert storage["host"] == "db.example.org" and storage["passwordKeyRef"] == {
        "name": "mariadb-password",
        "key": "password",
    }


def test_controller_ha_and_metrics_are_upstreams_keys() -> None:
    spec = render(QUICK_START)[("Controller", "slurm")]["spec"]
    assert spec["ha"] == {"enabled": False, "backups": 1}
    monitor = spec["metrics"]["serviceMonitor"]
    assert spec["metrics"]["enabled"] is False and monitor["enabled"] is False and monitor["interval"] == "30s"
    assert [e["path"] for e in monitor["endpoints"]] == [f"/metrics/{p}" for p in SLURMCTLD_METRICS]
    Controller.model_validate(render(QUICK_START)[("Controller", "slurm")])
    values = {"controller": {"ha": {"enabled": True}, "persistence": {"existingClaim": "slurm-state"}}}
    spec = render({**QUICK_START, **values})[("Controller", "slurm")]["spec"]
    assert spec["ha"] == {"enabled": True, "backups": 1} and spec["persistence"]["existingClaim"] == "slurm-state"


def test_another_release_name_prefixes_every_object() -> None:
    objs = render(QUICK_START, name="team-a")
    assert ("Controller", "team-a-slurm") in objs and ("NodeSet", "team-a-slurm-worker-slinky") in objs
    assert objs[("NodeSet", "team-a-slurm-worker-slinky")]["spec"]["controllerRef"] == {"name": "team-a-slurm"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"nodesets": {"slinky": {"replicas": -1}}}, "at '/nodesets/slinky/replicas': minimum: got -1, want 0"),
        ({"nodesets": {"slinky": {"slurmd": {"image": ""}}}}, "at '/nodesets/slinky/slurmd/image'"),
        ({"nodesets": {"slinky": {"slurmd": {"imag": "x"}}}}, "additional properties 'imag' not allowed"),
        ({"nodeset": {"slinky": {}}}, "additional properties 'nodeset' not allowed"),
        ({"controller": {"extraConf": "MaxJobCount=1\u0007"}}, "at '/controller/extraConf'"),
        ({"partitions": {"p": {"enabled": True, "nodesets": []}}}, "at '/partitions/p/nodesets'"),
        ({"controller": {"ha": {"backups": 0}}}, "at '/controller/ha/backups': minimum: got 0, want 1"),
    ],
)
def test_bad_values_fail_before_anything_is_made_with_the_schemas_words(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmValuesError) as err:
        render(values)
    assert message in str(err.value)


def test_lint_strict_for_kubernetes_1_20() -> None:
    result = helm.lint(str(CHART), values=QUICK_START, strict=True, kube_version="v1.20.2")
    # Severity 1 is informational ("icon is recommended"); strict mode turns warnings into errors.
    assert not result.get("errors") and not [m for m in result.get("messages", []) if m["severity"] > 1], result


# ------------------------------------------------------------------------------------------ live
def _kubectl(env: dict[str, str], ns: str, *args: str) -> str:
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", env["KUBECONFIG"], "-n", ns, *args], capture_output=True, text=True, timeout=60
    )
    return proc.stdout if proc.returncode == 0 else ""


@pytest.mark.timeout(600)
def test_helm_install_runs_a_job_upgrade_reconfigures_uninstall_leaves_nothing(
    dev_env: dict[str, str], tmp_path: Path
) -> None:
    from kubernetes import client, config

    from slinky.dev import real_nodes, stack

    ns = f"slurm-chart-{uuid.uuid4().hex[:6]}"
    api = config.new_client_from_config(config_file=dev_env["KUBECONFIG"])
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    annotations = real_nodes.namespace_annotations(stack.REAL_NODE_TAINT)  # its pods go to the real nodes
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns, annotations=annotations)))
    operator = start_operator(
        dev_env,
        tmp_path / "operator.log",
        SLINKY_OPERATOR__NAMESPACES=json.dumps([ns]),
        SLINKY_OPERATOR__TASK_QUEUE=f"chart-{ns}",
        SLINKY_OPERATOR__RECONFIGURE_VERIFY_SECONDS="60",
    )
    values = {**QUICK_START, "controller": {"extraConf": "SchedulerParameters=batch_sched_delay=0,sched_interval=1"}}
    login = "deploy/slurm-login-slinky"
    try:
        with helm.Config(kubeconfig_path=dev_env["KUBECONFIG"], namespace=ns) as cfg:
            cfg.install(str(CHART), "slurm", values, timeout=60)
            assert cfg.status("slurm")["status"] == "deployed"
            wait_for(
                lambda: (
                    "idle" in _kubectl(dev_env, ns, "exec", login, "--", "sinfo", "-h", "-n", "slinky-0", "-o", "%t")
                ),
                300,
                "slinky-0 idle in sinfo from the login pod",
            )
            partitions = _kubectl(dev_env, ns, "exec", login, "--", "sinfo", "-h", "-o", "%P")
            assert "all*" in partitions.split() and "slinky" in partitions.split(), partitions
            job = _kubectl(
                dev_env, ns, "exec", login, "--", "sbatch", "--parsable", "--chdir=/tmp", "--wrap", "hostname"
            )
            assert job.strip().isdigit(), job
            show = ("exec", login, "--", "scontrol", "show", "job", job.strip())
            wait_for(lambda: "JobState=COMPLETED" in _kubectl(dev_env, ns, *show), 90, f"job {job.strip()} COMPLETED")

            # helm upgrade with a new extraConf: the Controller changes, ControllerReconfigure brings it to slurmctld.
            upgraded = {**values, "controller": {"extraConf": values["controller"]["extraConf"] + "\nMaxJobCount=7000"}}
            cfg.upgrade(str(CHART), "slurm", upgraded, timeout=60)
            assert cfg.status("slurm")["revision"] == 2
            config_of = ("exec", "slurm-controller-0", "--", "scontrol", "show", "config")
            wait_for(
                lambda: any(
                    line.split() == ["MaxJobCount", "=", "7000"]
                    for line in _kubectl(dev_env, ns, *config_of).splitlines()
                ),
                240,
                "slurmctld runs MaxJobCount=7000",
            )
            controller = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "slurm")
            valid = next(c for c in controller["status"]["conditions"] if c["type"] == "ConfigValid")
            assert valid["status"] == "True", valid

            cfg.uninstall("slurm", timeout=60)
            assert not [r for r in cfg.list() if r["name"] == "slurm"]
        for plural in ("controllers", "restapis", "nodesets", "loginsets", "accountings"):
            assert not custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural)["items"]
        wait_for(lambda: not core.list_namespaced_pod(ns).items, 120, "every pod of the release gone")
    finally:
        for plural in ("controllers", "nodesets", "loginsets", "restapis", "accountings"):
            for item in custom.list_namespaced_custom_object("slinky.slurm.net", "v1beta1", ns, plural)["items"]:
                custom.delete_namespaced_custom_object(
                    "slinky.slurm.net", "v1beta1", ns, plural, item["metadata"]["name"]
                )
        deadline = time.monotonic() + 60
        while core.list_namespaced_pod(ns).items and time.monotonic() < deadline:
            time.sleep(1)
        stop_operator(operator)
        end_workflows_of(dev_env, f"chart-{ns}")
        core.delete_namespace(ns)
