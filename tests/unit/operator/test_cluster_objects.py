"""Kubernetes objects of a managed Slurm cluster: names, labels, containers, volumes, merges, ownership."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from slinky import wellknown
from slinky.operator import cluster_objects as co
from slinky.operator import slurmconf, ssh
from slinky.operator.api.accounting import Accounting
from slinky.operator.api.controller import Controller
from slinky.operator.api.loginset import LoginSet
from slinky.operator.api.restapi import RestApi

Obj = dict[str, Any]

KEYS = {"slurmKeyRef": {"name": "slurm-auth", "key": "slurm.key"}, "jwtKeyRef": {"name": "jwt-auth", "key": "jwt"}}


def _imaged(spec: dict[str, Any], daemon: str) -> dict[str, Any]:
    """The spec with its daemon container's image set unless the test sets one (every builder requires it)."""
    container = dict(spec.get(daemon) or {})
    container.setdefault("image", f"{daemon}:26.05")
    return {**spec, daemon: container}


def controller(**spec: Any) -> Controller:
    return Controller.model_validate(
        {
            "metadata": {"name": "slurm", "namespace": "hpc", "uid": "c-uid"},
            "spec": _imaged({**KEYS, **spec}, "slurmctld"),
        }
    )


def restapi(**spec: Any) -> RestApi:
    return RestApi.model_validate(
        {
            "metadata": {"name": "rest", "namespace": "hpc", "uid": "r-uid"},
            "spec": _imaged({"controllerRef": {"name": "slurm"}, **spec}, "slurmrestd"),
        }
    )


def accounting(**spec: Any) -> Accounting:
    return Accounting.model_validate(
        {
            "metadata": {"name": "acct", "namespace": "hpc", "uid": "a-uid"},
            "spec": _imaged({**KEYS, "storageConfig": {"host": "mariadb", "username": "slurm"}, **spec}, "slurmdbd"),
        }
    )


def loginset(**spec: Any) -> LoginSet:
    return LoginSet.model_validate(
        {
            "metadata": {"name": "login", "namespace": "hpc", "uid": "l-uid"},
            "spec": _imaged(
                {"controllerRef": {"name": "slurm"}, "sssdConfRef": {"name": "sssd", "key": "sssd.conf"}, **spec},
                "login",
            ),
        }
    )


def only(items: list[Obj], name: str) -> Obj:
    found = [item for item in items if item.get("name") == name]
    assert len(found) == 1, f"{name!r} in {[i.get('name') for i in items]}"
    return found[0]


def container(workload: Obj, name: str) -> Obj:
    return only(workload["spec"]["template"]["spec"]["containers"], name)


def volume(workload: Obj, name: str) -> Obj:
    return only(workload["spec"]["template"]["spec"]["volumes"], name)


def mount_paths(c: Obj) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in c["volumeMounts"]}


def env(c: Obj) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in c.get("env", [])}


def assert_selects(service: Obj, workload: Obj) -> None:
    """The Service's selector and the workload's selector both match the pod template's labels."""
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert workload["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def assert_owned_by(obj: Obj, kind: str, name: str, uid: str) -> None:
    assert obj["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "slinky.slurm.net/v1beta1",
            "kind": kind,
            "name": name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


# Names and labels.


def test_names() -> None:
    c = controller()
    assert co.controller_pod_name(c) == "slurm-controller-0"
    assert co.controller_statefulset_name(c) == co.controller_service_name(c) == "slurm-controller"
    assert co.controller_internal_service_name(c) == "slurm-controller-internal"
    assert co.config_map_name(c) == "slurm-config"
    assert co.workers_service_name("slurm") == "slurm-workers"
    assert co.restapi_deployment_name(restapi()) == co.restapi_service_name(restapi()) == "rest-restapi"
    a = accounting()
    assert co.accounting_statefulset_name(a) == co.accounting_service_name(a) == "acct-accounting"
    assert co.accounting_secret_name(a) == "acct-accounting" and co.accounting_pod_name(a) == "acct-accounting-0"
    assert co.loginset_deployment_name(loginset()) == co.loginset_service_name(loginset()) == "login"


def test_names_match_what_slurm_conf_points_at() -> None:
    c, a = controller(accountingRef={"name": "acct"}), accounting()
    conf = slurmconf.slurm_conf(c, [], a, slurmconf.ConfFiles())
    pod, internal = co.controller_pod_name(c), co.controller_internal_service_name(c)
    assert f"SlurmctldHost={pod}({pod}.{internal}.hpc)" in conf
    assert f"SlurmctldAddr={co.controller_service_name(c)}.hpc" in conf
    assert f"AccountingStorageHost={co.accounting_service_name(a)}" in conf
    assert f"StateSaveLocation={co.statesave_path(c)}" in conf
    assert f"DbdHost={co.accounting_pod_name(a)}" in slurmconf.slurmdbd_conf(a, "pw")


def test_selector_labels_per_component() -> None:
    assert co.selector_labels("controller", controller()) == {
        "app.kubernetes.io/name": "slurmctld",
        "app.kubernetes.io/instance": "slurm",
        "app.kubernetes.io/component": "controller",
    }
    assert co.selector_labels("restapi", restapi())[wellknown.LABEL_APP] == "slurmrestd"
    assert co.selector_labels("accounting", accounting())[wellknown.LABEL_APP] == "slurmdbd"
    login = co.selector_labels("login", loginset())
    assert login[wellknown.LABEL_APP] == "login" and login[wellknown.LABEL_INSTANCE] == "login"
    with pytest.raises(TypeError, match="needs a Controller"):
        co.selector_labels("controller", restapi())


# Controller.


def test_config_map_holds_the_files_and_their_hash() -> None:
    files = {"slurm.conf": "ClusterName=x\n", "cgroup.conf": "CgroupPlugin=disabled\n"}
    cm = co.controller_config_map(controller(), files)
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "slurm-config"
    assert cm["metadata"]["namespace"] == "hpc" and cm["data"] == files and cm["data"] is not files
    assert cm["metadata"]["annotations"][co.ANNOTATION_SLURM_CONFIG_HASH] == slurmconf.config_hash(files)
    assert cm["metadata"]["labels"][wellknown.LABEL_CLUSTER] == "slurm"
    assert_owned_by(cm, "Controller", "slurm", "c-uid")


def test_controller_services() -> None:
    c = controller()
    service, internal = co.controller_services(c)
    sts = co.controller_statefulset(c, "h")
    assert service["metadata"]["name"] == "slurm-controller"
    assert service["spec"]["ports"] == [
        {"name": "slurmctld", "protocol": "TCP", "port": 6817, "targetPort": "slurmctld"}
    ]
    assert "clusterIP" not in service["spec"]
    assert internal["metadata"]["name"] == sts["spec"]["serviceName"] == "slurm-controller-internal"
    assert internal["spec"]["clusterIP"] == "None" and internal["spec"]["publishNotReadyAddresses"] is True
    assert internal["spec"]["ports"][0]["port"] == 6817
    for svc in (service, internal):
        assert svc["spec"]["selector"] == co.selector_labels("controller", c)
        assert_selects(svc, sts)
        assert_owned_by(svc, "Controller", "slurm", "c-uid")


def test_controller_service_merges_spec_service() -> None:
    c = controller(
        service={
            "metadata": {"annotations": {"lb": "yes"}, "labels": {"team": "hpc"}},
            "spec": {
                "type": "NodePort",
                "externalIPs": ["1.2.3.4"],
                "selector": {"extra": "x"},
                "ports": [{"name": "metrics", "port": 9000}],
            },
            "port": 16817,
            "nodePort": 30017,
        }
    )
    service, internal = co.controller_services(c)
    assert service["spec"]["type"] == "NodePort" and "externalIPs" not in service["spec"]
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9000},
        {"name": "slurmctld", "protocol": "TCP", "port": 16817, "targetPort": "slurmctld", "nodePort": 30017},
    ]
    assert service["spec"]["selector"] == {"extra": "x", **co.selector_labels("controller", c)}
    assert service["metadata"]["annotations"] == {"lb": "yes"} and service["metadata"]["labels"]["team"] == "hpc"
    # The internal Service is the StatefulSet's: spec.service does not reach it.
    assert "type" not in internal["spec"] and len(internal["spec"]["ports"]) == 1
    assert "team" not in internal["metadata"]["labels"]


def test_controller_service_refuses_a_port_clash() -> None:
    c = controller(service={"spec": {"ports": [{"name": "slurmctld", "port": 1}]}})
    with pytest.raises(ValueError, match="port name slurmctld"):
        co.controller_services(c)


def test_controller_statefulset_basics() -> None:
    sts = co.controller_statefulset(controller(), "abc")
    spec = sts["spec"]
    assert sts["apiVersion"] == "apps/v1" and sts["kind"] == "StatefulSet"
    assert sts["metadata"]["name"] == "slurm-controller" and sts["metadata"]["namespace"] == "hpc"
    assert spec["replicas"] == 1 and spec["serviceName"] == "slurm-controller-internal"
    assert spec["updateStrategy"] == {"type": "RollingUpdate"} and spec["revisionHistoryLimit"] == 0
    assert_owned_by(sts, "Controller", "slurm", "c-uid")
    pod = spec["template"]
    assert pod["metadata"]["labels"][wellknown.LABEL_CLUSTER] == "slurm"
    assert pod["metadata"]["annotations"][wellknown.ANNOTATION_DEFAULT_CONTAINER] == "slurmctld"
    assert "hostname" not in pod["spec"] and "subdomain" not in pod["spec"]  # the StatefulSet sets them
    assert pod["spec"]["securityContext"]["runAsUser"] == 401 and pod["spec"]["automountServiceAccountToken"] is False
    assert [c["name"] for c in pod["spec"]["containers"]] == ["slurmctld"]
    assert "initContainers" not in pod["spec"]  # no reconfigure or logfile sidecar
    ctld = container(sts, "slurmctld")
    assert ctld["ports"] == [{"name": "slurmctld", "containerPort": 6817, "protocol": "TCP"}]
    assert ctld["readinessProbe"] == {"httpGet": {"path": "/readyz", "port": "slurmctld"}}
    for probe in ("livenessProbe", "startupProbe"):
        assert ctld[probe] == {
            "httpGet": {"path": "/livez", "port": "slurmctld"},
            "failureThreshold": 6,
            "periodSeconds": 10,
        }


def test_controller_slurm_etc_volume() -> None:
    c = controller(
        configFileRefs=[{"name": "zz-files"}],
        prologScriptRefs=[{"name": "prolog"}],
        epilogSlurmctldScriptRefs=[{"name": "a-epilog"}, {"name": "prolog"}],
        jwksKeyRef={"name": "jwks", "key": "keys.json"},
    )
    sts = co.controller_statefulset(c, "h")
    etc = volume(sts, "slurm-etc")["projected"]
    assert etc["defaultMode"] == 0o610
    assert etc["sources"] == [
        {"configMap": {"name": "slurm-config"}},
        {"secret": {"name": "slurm-auth", "items": [{"key": "slurm.key", "path": "slurm.key"}]}},
        {"secret": {"name": "jwt-auth", "items": [{"key": "jwt", "path": "jwt.key"}]}},
        {"configMap": {"name": "a-epilog"}},
        {"configMap": {"name": "prolog"}},
        {"configMap": {"name": "zz-files"}},
        {"configMap": {"name": "jwks", "items": [{"key": "keys.json", "path": "jwks.json"}]}},
    ]
    mounts = mount_paths(container(sts, "slurmctld"))
    assert mounts[slurmconf.SLURM_ETC_DIR] == "slurm-etc"
    assert mounts["/var/spool/slurmctld/hpc_slurm"] == "statesave"
    assert mounts["/var/log/slurm"] == "slurm-logfile" and mounts["/run/slurmctld"] == "slurm-authsocket"
    assert only(container(sts, "slurmctld")["volumeMounts"], "slurm-etc")["readOnly"] is True


def test_deprecated_jwt_field_is_the_fallback() -> None:
    c = Controller.model_validate(
        {
            "metadata": {"name": "slurm", "namespace": "hpc"},
            "spec": {
                "slurmKeyRef": KEYS["slurmKeyRef"],
                "jwtHs256KeyRef": {"name": "old-jwt", "key": "k"},
                "slurmctld": {"image": "slurmctld:26.05"},
            },
        }
    )
    sources = volume(co.controller_statefulset(c, "h"), "slurm-etc")["projected"]["sources"]
    assert {"secret": {"name": "old-jwt", "items": [{"key": "k", "path": "jwt.key"}]}} in sources


def test_statesave_default_is_a_claim_template() -> None:
    sts = co.controller_statefulset(controller(clusterName="alpha"), "h")
    assert sts["spec"]["volumeClaimTemplates"] == [
        {
            "metadata": {"name": "statesave"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "4Gi"}}},
        }
    ]
    assert "statesave" not in {v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert mount_paths(container(sts, "slurmctld"))["/var/spool/slurmctld/alpha"] == "statesave"


def test_statesave_claim_takes_the_persistence_fields() -> None:
    c = controller(
        persistence={
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "fast",
            "volumeMode": "Filesystem",
        }
    )
    claim = co.controller_statefulset(c, "h")["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "fast",
        "volumeMode": "Filesystem",
    }


def test_statesave_existing_claim_and_disabled() -> None:
    sts = co.controller_statefulset(controller(persistence={"existingClaim": "my-pvc"}), "h")
    assert "volumeClaimTemplates" not in sts["spec"]
    assert volume(sts, "statesave") == {"name": "statesave", "persistentVolumeClaim": {"claimName": "my-pvc"}}
    sts = co.controller_statefulset(controller(persistence={"enabled": False, "existingClaim": "ignored"}), "h")
    assert "volumeClaimTemplates" not in sts["spec"]
    assert volume(sts, "statesave") == {"name": "statesave", "emptyDir": {}}


def test_config_hash_only_without_inplace_reconfigure() -> None:
    pod = co.controller_statefulset(controller(), "abc")["spec"]["template"]
    assert pod["metadata"]["annotations"][co.ANNOTATION_SLURM_CONFIG_HASH] == "abc"
    pod = co.controller_statefulset(controller(inplaceReconfigure=True), "abc")["spec"]["template"]
    assert co.ANNOTATION_SLURM_CONFIG_HASH not in pod["metadata"]["annotations"]
    # With inplace, a config change leaves the pod template as it was: no roll.
    c = controller(inplaceReconfigure=True)
    assert co.controller_statefulset(c, "one") == co.controller_statefulset(c, "two")


def test_controller_template_and_container_merge() -> None:
    c = controller(
        template={
            "metadata": {"labels": {"team": "hpc"}, "annotations": {"note": "x"}},
            "spec": {
                "nodeSelector": {"disk": "ssd"},
                "securityContext": {"fsGroupChangePolicy": "OnRootMismatch"},
                "volumes": [{"name": "extra", "emptyDir": {}}],
                "containers": [{"name": "sidecar", "image": "busybox"}, {"name": "slurmctld", "workingDir": "/x"}],
            },
        },
        slurmctld={
            "name": "renamed",
            "image": "slurmctld:25.05",
            "args": ["-vvv"],
            "env": [{"name": "EXTRA", "value": "1"}],
            "volumeMounts": [{"name": "extra", "mountPath": "/extra"}],
            "readinessProbe": {"tcpSocket": {"port": 6817}, "periodSeconds": 3},
        },
    )
    sts = co.controller_statefulset(c, "h")
    pod = sts["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd"}
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 401,
        "runAsGroup": 401,
        "fsGroup": 401,
        "fsGroupChangePolicy": "OnRootMismatch",
    }
    assert [x["name"] for x in pod["spec"]["containers"]] == ["slurmctld", "sidecar"]
    assert {"slurm-etc", "extra"} <= {v["name"] for v in pod["spec"]["volumes"]}
    assert pod["metadata"]["labels"]["team"] == "hpc" and pod["metadata"]["annotations"]["note"] == "x"
    assert pod["metadata"]["labels"][wellknown.LABEL_APP] == "slurmctld"  # ours win over the template's
    ctld = container(sts, "slurmctld")
    assert ctld["image"] == "slurmctld:25.05" and ctld["args"] == ["-vvv"] and ctld["workingDir"] == "/x"
    assert env(ctld) == {"EXTRA": "1"}
    assert mount_paths(ctld)["/extra"] == "extra" and mount_paths(ctld)[slurmconf.SLURM_ETC_DIR] == "slurm-etc"
    assert ctld["readinessProbe"] == {"tcpSocket": {"port": 6817}, "periodSeconds": 3}
    assert ctld["livenessProbe"]["httpGet"]["path"] == "/livez"


def test_probe_override_keeps_our_handler_when_only_thresholds_change() -> None:
    sts = co.controller_statefulset(controller(slurmctld={"livenessProbe": {"failureThreshold": 20}}), "h")
    assert container(sts, "slurmctld")["livenessProbe"] == {
        "httpGet": {"path": "/livez", "port": "slurmctld"},
        "failureThreshold": 20,
        "periodSeconds": 10,
    }


def test_template_labels_cannot_steal_the_selector() -> None:
    c = controller(template={"metadata": {"labels": {wellknown.LABEL_INSTANCE: "other"}}})
    sts = co.controller_statefulset(c, "h")
    (service, _) = co.controller_services(c)
    assert_selects(service, sts)


def test_cr_metadata_is_copied_but_not_last_applied() -> None:
    c = Controller.model_validate(
        {
            "metadata": {
                "name": "slurm",
                "namespace": "hpc",
                "labels": {"env": "prod"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "owner": "me"},
            },
            "spec": {**KEYS, "slurmctld": {"image": "slurmctld:26.05"}},
        }
    )
    sts = co.controller_statefulset(c, "h")
    for meta in (sts["metadata"], sts["spec"]["template"]["metadata"]):
        assert meta["labels"]["env"] == "prod" and meta["annotations"]["owner"] == "me"
        assert "kubectl.kubernetes.io/last-applied-configuration" not in meta["annotations"]


def test_controller_builders_refuse_external_and_missing_keys() -> None:
    external = controller(external=True, externalConfig={"host": "h", "port": 6817})
    builds: list[Callable[[], object]] = [
        lambda: co.controller_statefulset(external, "h"),
        lambda: co.controller_services(external),
        lambda: co.controller_config_map(external, {}),
    ]
    for build in builds:
        with pytest.raises(ValueError, match="external"):
            build()
    c = Controller.model_validate(
        {"metadata": {"name": "slurm"}, "spec": {"jwtKeyRef": KEYS["jwtKeyRef"], "slurmctld": {"image": "x"}}}
    )
    with pytest.raises(ValueError, match="slurmKeyRef"):
        co.controller_statefulset(c, "h")


def test_builders_are_pure() -> None:
    c = controller(
        slurmctld={"env": [{"name": "EXTRA", "value": "1"}]},
        template={"spec": {"nodeSelector": {"disk": "ssd"}, "volumes": [{"name": "v", "emptyDir": {}}]}},
    )
    before = c.model_dump()
    sts = co.controller_statefulset(c, "h")
    assert co.controller_statefulset(c, "h") == sts
    sts["spec"]["template"]["spec"]["nodeSelector"]["disk"] = "changed"
    container(sts, "slurmctld")["env"][0]["value"] = "changed"
    volume(sts, "v")["emptyDir"]["medium"] = "Memory"
    assert c.model_dump() == before


# RestApi.


def test_restapi_deployment() -> None:
    r, c = restapi(replicas=3), controller()
    dep = co.restapi_deployment(r, c, has_accounting=False)
    assert dep["kind"] == "Deployment" and dep["metadata"]["name"] == "rest-restapi"
    assert dep["spec"]["replicas"] == 3
    assert dep["metadata"]["labels"][wellknown.LABEL_CLUSTER] == "slurm"
    assert_owned_by(dep, "RestApi", "rest", "r-uid")
    rest = container(dep, "slurmrestd")
    assert env(rest) == {"SLURM_JWT": "daemon", "SLURMRESTD_SECURITY": "disable_unshare_files,disable_unshare_sysv"}
    assert rest["args"] == ["-s", "openapi/slurmctld", "0.0.0.0:6820"]
    assert rest["ports"] == [{"name": "slurmrestd", "containerPort": 6820, "protocol": "TCP"}]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert rest[probe]["tcpSocket"] == {"port": 6820}
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534, "fsGroup": 65534}
    assert volume(dep, "slurm-etc")["projected"]["sources"] == [
        {"configMap": {"name": "slurm-config", "items": [{"key": "slurm.conf", "path": "slurm.conf"}]}},
        {"secret": {"name": "slurm-auth", "items": [{"key": "slurm.key", "path": "slurm.key"}]}},
    ]
    assert mount_paths(rest) == {slurmconf.SLURM_ETC_DIR: "slurm-etc"}


def test_restapi_args_with_accounting_and_user_args() -> None:
    dep = co.restapi_deployment(restapi(slurmrestd={"args": ["-vv"], "name": "x"}), controller(), has_accounting=True)
    assert container(dep, "slurmrestd")["args"] == ["-vv", "0.0.0.0:6820"]
    dep = co.restapi_deployment(restapi(slurmrestd={"args": ["-vv"]}), controller(), has_accounting=False)
    assert container(dep, "slurmrestd")["args"] == ["-s", "openapi/slurmctld", "-vv", "0.0.0.0:6820"]


def test_restapi_replicas_zero_and_default() -> None:
    assert co.restapi_deployment(restapi(replicas=0), controller(), False)["spec"]["replicas"] == 0
    assert co.restapi_deployment(restapi(), controller(), False)["spec"]["replicas"] == 1


def test_restapi_service() -> None:
    r = restapi(service={"metadata": {"labels": {"x": "y"}}, "port": 8080})
    svc = co.restapi_service(r)
    assert svc["metadata"]["name"] == "rest-restapi" and svc["metadata"]["labels"]["x"] == "y"
    assert svc["spec"]["ports"] == [{"name": "slurmrestd", "protocol": "TCP", "port": 8080, "targetPort": "slurmrestd"}]
    assert_selects(svc, co.restapi_deployment(r, controller(), False))
    assert_owned_by(svc, "RestApi", "rest", "r-uid")


# Accounting.


def test_accounting_secret() -> None:
    secret = co.accounting_secret(accounting(), "DbdPort=6819\n")
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == "acct-accounting"
    assert base64.b64decode(secret["data"]["slurmdbd.conf"]).decode() == "DbdPort=6819\n"
    assert_owned_by(secret, "Accounting", "acct", "a-uid")


def test_accounting_statefulset_and_service() -> None:
    a = accounting()
    sts = co.accounting_statefulset(a)
    assert sts["metadata"]["name"] == "acct-accounting" and sts["spec"]["replicas"] == 1
    assert sts["spec"]["serviceName"] == co.accounting_service_name(a)
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert_owned_by(sts, "Accounting", "acct", "a-uid")
    dbd = container(sts, "slurmdbd")
    assert "args" not in dbd
    assert dbd["ports"] == [{"name": "slurmdbd", "containerPort": 6819, "protocol": "TCP"}]
    assert dbd["readinessProbe"] == {"tcpSocket": {"port": 6819}}
    assert mount_paths(dbd) == {slurmconf.SLURM_ETC_DIR: "slurm-etc", "/run": "run"}
    assert volume(sts, "slurm-etc")["projected"]["sources"] == [
        {"secret": {"name": "acct-accounting", "items": [{"key": "slurmdbd.conf", "path": "slurmdbd.conf"}]}},
        {"secret": {"name": "slurm-auth", "items": [{"key": "slurm.key", "path": "slurm.key"}]}},
        {"secret": {"name": "jwt-auth", "items": [{"key": "jwt", "path": "jwt.key"}]}},
    ]
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert co.ANNOTATION_SLURMDBD_CONF_HASH not in annotations
    hashed = co.accounting_statefulset(a, config_hash="x1")["spec"]["template"]["metadata"]["annotations"]
    assert hashed[co.ANNOTATION_SLURMDBD_CONF_HASH] == "x1"
    svc = co.accounting_service(a)
    assert svc["metadata"]["name"] == "acct-accounting" and svc["spec"]["ports"][0]["port"] == 6819
    assert_selects(svc, sts)


def test_accounting_container_merge_and_external() -> None:
    sts = co.accounting_statefulset(accounting(slurmdbd={"name": "other", "env": [{"name": "A", "value": "b"}]}))
    assert env(container(sts, "slurmdbd")) == {"A": "b"}
    external = accounting(external=True, externalConfig={"host": "db", "port": 6819})
    builds: list[Callable[[], object]] = [
        lambda: co.accounting_statefulset(external),
        lambda: co.accounting_service(external),
        lambda: co.accounting_secret(external, ""),
    ]
    for build in builds:
        with pytest.raises(ValueError, match="external"):
            build()


# LoginSet.


def test_loginset_deployment() -> None:
    dep = co.loginset_deployment(loginset(replicas=0), controller())
    assert dep["metadata"]["name"] == "login" and dep["spec"]["replicas"] == 0
    assert_owned_by(dep, "LoginSet", "login", "l-uid")
    login = container(dep, "login")
    assert [x["name"] for x in dep["spec"]["template"]["spec"]["containers"]] == ["login"]
    assert login["args"] == ["--conf-server", "slurm-controller.hpc:6817"]
    assert env(login)["SACKD_OPTIONS"] == "--conf-server slurm-controller.hpc:6817"
    assert only(login["volumeMounts"], "sssd-conf") == {
        "name": "sssd-conf",
        "mountPath": "/etc/sssd/sssd.conf",
        "subPath": "sssd.conf",
        "readOnly": True,
    }
    assert volume(dep, "sssd-conf")["projected"]["sources"] == [
        {"secret": {"name": "sssd", "items": [{"key": "sssd.conf", "path": "sssd.conf", "mode": 0o600}]}}
    ]
    assert volume(dep, "slurm-etc")["projected"]["sources"] == [
        {"secret": {"name": "slurm-auth", "items": [{"key": "slurm.key", "path": "slurm.key"}]}}
    ]
    assert mount_paths(login)[slurmconf.SLURM_ETC_DIR] == "slurm-etc"
    assert mount_paths(login)["/run/slurm"] == "sackd-dir"
    assert login["readinessProbe"] == {"exec": {"command": ["test", "-S", "/run/slurm/sack.socket"]}}
    pod = dep["spec"]["template"]["spec"]
    assert pod["dnsConfig"]["searches"] == ["slurm-workers.hpc.svc.cluster.local"]
    # sshd beside sackd: its config, root's authorized_keys and the host keys, each at its own path.
    assert env(login)["SSHD"] == "1"
    paths = mount_paths(login)
    assert paths["/etc/ssh/sshd_config"] == "ssh-config" and paths["/root/.ssh/authorized_keys"] == "ssh-config"
    for key in ("ssh_host_rsa_key", "ssh_host_ecdsa_key", "ssh_host_ed25519_key"):
        assert paths[f"/etc/ssh/{key}"] == paths[f"/etc/ssh/{key}.pub"] == "ssh-host-keys"
    (keys,) = volume(dep, "ssh-host-keys")["projected"]["sources"]
    assert keys["secret"]["name"] == "login-ssh-host-keys"
    modes = {i["path"]: i["mode"] for i in keys["secret"]["items"]}
    assert modes["ssh_host_ed25519_key"] == 0o600 and modes["ssh_host_ed25519_key.pub"] == 0o644
    (config,) = volume(dep, "ssh-config")["projected"]["sources"]
    assert config["configMap"]["name"] == "login-ssh-config"
    assert "slinky.slurm.net/sshd-conf-hash" in dep["spec"]["template"]["metadata"]["annotations"]


def test_loginset_ssh_config_and_host_keys() -> None:
    ls = loginset(rootSshAuthorizedKeys="ssh-ed25519 AAAA alice@example", extraSshdConfig="LoginGraceTime 30")
    cm = co.loginset_ssh_config(ls)
    assert cm["metadata"]["name"] == "login-ssh-config"
    assert_owned_by(cm, "LoginSet", "login", "l-uid")
    sshd_config = cm["data"]["sshd_config"].splitlines()
    assert "UsePAM yes" in sshd_config and "Subsystem sftp internal-sftp" in sshd_config
    assert sshd_config[-1] == "LoginGraceTime 30", "extraSshdConfig comes last"
    assert cm["data"]["authorized_keys"].splitlines()[-1] == "ssh-ed25519 AAAA alice@example"
    before = co.loginset_deployment(loginset(), controller())["spec"]["template"]["metadata"]["annotations"]
    after = co.loginset_deployment(ls, controller())["spec"]["template"]["metadata"]["annotations"]
    hash_key = "slinky.slurm.net/sshd-conf-hash"
    assert before[hash_key] != after[hash_key], "a new sshd_config or authorized_keys makes new pods"
    keys = ssh.host_keys("hpc/login")
    secret = co.loginset_host_keys(ls, keys)
    assert secret["metadata"]["name"] == "login-ssh-host-keys"
    assert sorted(secret["data"]) == sorted(f"{k}{p}" for k in ssh.HOST_KEY_FILES for p in ("", ".pub"))
    assert keys["ssh_host_ed25519_key"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert keys["ssh_host_ed25519_key.pub"].startswith("ssh-ed25519 ") and keys["ssh_host_rsa_key.pub"].startswith(
        "ssh-rsa "
    )
    assert ssh.host_keys()["ssh_host_ed25519_key"] != keys["ssh_host_ed25519_key"], "new keys each time"


def test_loginset_merges_and_external_controller() -> None:
    ls = loginset(
        login={"args": ["-v"], "name": "sshd"},
        template={"spec": {"dnsConfig": {"searches": ["corp.example"], "options": [{"name": "ndots", "value": "2"}]}}},
        strategy={"type": "Recreate"},
    )
    ext = Controller.model_validate(
        {
            "metadata": {"name": "slurm", "namespace": "hpc"},
            "spec": {**KEYS, "external": True, "externalConfig": {"host": "ctld.example", "port": 7817}},
        }
    )
    dep = co.loginset_deployment(ls, ext)
    assert container(dep, "login")["args"] == ["--conf-server", "ctld.example:7817", "-v"]
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    dns = dep["spec"]["template"]["spec"]["dnsConfig"]
    assert dns["searches"] == ["slurm-workers.hpc.svc.cluster.local", "corp.example"]
    assert dns["options"] == [{"name": "ndots", "value": "2"}]
    assert co.loginset_deployment(loginset(), controller())["spec"]["replicas"] == 1


def test_loginset_service() -> None:
    ls = loginset(service={"spec": {"type": "LoadBalancer"}, "port": 2222})
    svc = co.loginset_service(ls)
    assert svc["metadata"]["name"] == "login" and svc["spec"]["type"] == "LoadBalancer"
    assert svc["spec"]["ports"] == [{"name": "login", "protocol": "TCP", "port": 2222, "targetPort": "login"}]
    dep = co.loginset_deployment(ls, controller())
    assert_selects(svc, dep)
    assert container(dep, "login")["ports"][0]["name"] == "login"  # the Service's targetPort resolves


def _shared(obj: Any, seen: dict[int, Any]) -> list[Any]:
    """Dicts and lists reachable twice in `obj` (so editing one place of a built object would edit another)."""
    if not isinstance(obj, dict | list):
        return []
    if id(obj) in seen:
        return [obj]
    seen[id(obj)] = obj
    children = obj.values() if isinstance(obj, dict) else obj
    return [shared for child in children for shared in _shared(child, seen)]


def test_built_objects_share_no_parts() -> None:
    c = controller(jwksKeyRef={"name": "jwks", "key": "k"}, slurmctld={"env": [{"name": "A", "value": "1"}]})
    built: list[Any] = [
        co.controller_statefulset(c, "h"),
        co.controller_services(c),
        co.controller_config_map(c, {"slurm.conf": ""}),
        co.restapi_deployment(restapi(), c, False),
        co.restapi_service(restapi()),
        co.accounting_statefulset(accounting()),
        co.accounting_service(accounting()),
        co.accounting_secret(accounting(), ""),
        co.loginset_deployment(loginset(), c),
        co.loginset_service(loginset()),
    ]
    seen: dict[int, Any] = {}
    assert [shared for obj in built for shared in _shared(obj, seen)] == []


def test_the_workers_service_is_headless_over_the_controllers_slurmd_pods() -> None:
    from slinky.operator.api.controller import Controller

    ctl = Controller.model_validate(
        {
            "metadata": {"name": "slurm", "namespace": "hpc", "uid": "u"},
            "spec": {
                "slurmKeyRef": {"name": "k", "key": "slurm.key"},
                "jwtKeyRef": {"name": "j", "key": "jwt.key"},
                "slurmctld": {"image": "slurmctld:26.05"},
            },
        }
    )
    svc = co.workers_service(ctl)
    assert svc["metadata"]["name"] == "slurm-workers" and svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"app.kubernetes.io/name": "slurmd", "slinky.slurm.net/cluster": "slurm"}
    assert svc["spec"]["ports"] == [{"name": "slurmd", "port": 6818, "targetPort": 6818}]
    template = co.controller_statefulset(ctl, None)["spec"]["template"]["metadata"]
    assert co.ANNOTATION_SLURM_CONFIG_HASH not in (template.get("annotations") or {}), "None: left out"


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: co.controller_statefulset(controller(slurmctld={"image": ""}), "h"), "spec.slurmctld"),
        (lambda: co.restapi_deployment(restapi(slurmrestd={"image": None}), controller(), False), "spec.slurmrestd"),
        (lambda: co.accounting_statefulset(accounting(slurmdbd={"image": ""})), "spec.slurmdbd"),
        (lambda: co.loginset_deployment(loginset(login={"image": ""}), controller()), "spec.login"),
    ],
)
def test_a_daemon_without_an_image_is_named_not_built(build: Any, field: str) -> None:
    """The operator picks no image: a pod that could never start is refused by the builder, naming the field."""
    with pytest.raises(co.MissingImage, match=f"{field}.image is required"):
        build()


def test_controller_service_monitor_as_upstreams() -> None:
    ctl = controller(
        metrics={"enabled": True, "serviceMonitor": {"enabled": True, "interval": "30s", "labels": {"team": "hpc"}}}
    )
    sm = co.controller_service_monitor(ctl)
    assert (sm["apiVersion"], sm["kind"], sm["metadata"]["name"]) == (
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        "slurm",
    )
    assert sm["metadata"]["labels"]["team"] == "hpc"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["hpc"]}
    service = co.controller_services(ctl)[0]
    assert all(service["metadata"]["labels"][k] == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert [e["path"] for e in sm["spec"]["endpoints"]] == [
        "/metrics/jobs", "/metrics/nodes", "/metrics/partitions", "/metrics/scheduler"
    ]  # fmt: skip
    assert all(
        e["port"] == "slurmctld" and e["interval"] == "30s" and e["scheme"] == "http" for e in sm["spec"]["endpoints"]
    )
    own = controller(metrics={"serviceMonitor": {"endpoints": [{"path": "/metrics/jobs", "scrapeTimeout": "5s"}]}})
    assert co.controller_service_monitor(own)["spec"]["endpoints"] == [
        {"path": "/metrics/jobs", "port": "slurmctld", "scheme": "http", "scrapeTimeout": "5s"}
    ]


HA = {"ha": {"enabled": True}, "persistence": {"existingClaim": "slurm-state"}}


def test_ha_runs_a_primary_and_backups_on_one_claim_on_different_nodes() -> None:
    c = controller(
        **HA,
        template={"spec": {"affinity": {"nodeAffinity": {"x": 1}, "podAntiAffinity": {"preferred": [1]}}}},
    )
    sts = co.controller_statefulset(c, "h")
    assert sts["spec"]["replicas"] == 2 and "volumeClaimTemplates" not in sts["spec"]
    assert volume(sts, co.STATESAVE_VOLUME) == {
        "name": co.STATESAVE_VOLUME,
        "persistentVolumeClaim": {"claimName": "slurm-state"},
    }
    affinity = sts["spec"]["template"]["spec"]["affinity"]
    assert affinity["nodeAffinity"] == {"x": 1} and affinity["podAntiAffinity"]["preferred"] == [1]
    assert affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"labelSelector": {"matchLabels": co.selector_labels("controller", c)}, "topologyKey": "kubernetes.io/hostname"}
    ]
    # Only the slurmctld in control answers /readyz: a backup would never be ready.
    assert container(sts, "slurmctld")["readinessProbe"] == {"httpGet": {"path": "/livez", "port": "slurmctld"}}
    two = controller(**{**HA, "ha": {"enabled": True, "backups": 2}})
    assert co.controller_statefulset(two, "h")["spec"]["replicas"] == 3
    assert co.controller_statefulset(controller(ha={"enabled": False, "backups": 3}), "h")["spec"]["replicas"] == 1
    lines = slurmconf.slurm_conf(c, [], None, slurmconf.ConfFiles()).splitlines()
    assert [line for line in lines if line.startswith("SlurmctldHost=")] == [
        "SlurmctldHost=slurm-controller-0(slurm-controller-0.slurm-controller-internal.hpc)",
        "SlurmctldHost=slurm-controller-1(slurm-controller-1.slurm-controller-internal.hpc)",
    ]
    assert "SlurmctldAddr=slurm-controller.hpc" in lines


def test_ha_service_selects_the_active_slurmctld_only() -> None:
    service, internal = co.controller_services(controller(**HA))
    active = {wellknown.LABEL_CONTROLLER_ACTIVE: "true"}
    assert service["spec"]["selector"] == {**co.selector_labels("controller", controller()), **active}
    # SlurmctldHost's addresses reach every replica; without HA the one pod is selected by its labels alone.
    assert wellknown.LABEL_CONTROLLER_ACTIVE not in internal["spec"]["selector"]
    assert wellknown.LABEL_CONTROLLER_ACTIVE not in co.controller_services(controller())[0]["spec"]["selector"]


@pytest.mark.parametrize(
    "persistence", [{}, {"enabled": False, "existingClaim": "slurm-state"}, {"storageClassName": "fast"}]
)
def test_ha_without_an_existing_claim_is_not_built(persistence: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="existingClaim"):
        co.controller_statefulset(controller(ha={"enabled": True}, persistence=persistence), "h")
