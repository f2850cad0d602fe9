"""The Helm chart deploy/charts/slinky-operator with the real Helm v4 engine (helm-python-sdk).

Offline: render with default and other values (the Deployment's environment is read back through
``slinky.config.Settings``), the values schema, ``helm lint --strict`` for Kubernetes 1.20, every rendered object
against the Kubernetes 1.20 OpenAPI schemas (kubernetes-validate, strict), and the RBAC rules against the
Kubernetes APIs the operator's code calls. Live: install into a fresh namespace of the dev stack's
kube-apiserver, ask the apiserver what the ServiceAccount may do (SubjectAccessReview), upgrade, uninstall.

The installed operator must never act on other tests' objects: it watches only a namespace made for this test
(``operator.namespaces``), with leader election on, under its own Lease name and task queue. The stack's
kube-scheduler places its pods on the worker nodes, where the node agent runs them simulated; nothing here
waits for them.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from helm_python import _native  # helm-python-sdk is pinned (pyproject.toml): its ABI takes kube_version

from slinky.config import Settings
from tests.integration.charts import assert_valid_for_1_20

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "charts" / "slinky-operator"
KUBE_VERSION = "1.20.0"

Obj = dict[str, Any]

# What the operator calls (grep of the files below), resource -> verbs. Unscoped this is the ClusterRole;
# scoped, nodes stay in the ClusterRole and the rest goes to a Role per namespace.
NAMESPACED_RULES: dict[tuple[str, str], set[str]] = {
    ("", "pods"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "pods/status"): {"patch"},
    ("", "pods/log"): {"get"},
    ("", "persistentvolumeclaims"): {"list", "watch", "create", "delete"},
    ("monitoring.coreos.com", "servicemonitors"): {"get", "create", "patch", "delete"},
    ("", "secrets"): {"get", "list", "watch", "create", "patch"},
    ("", "events"): {"create"},
    ("policy", "poddisruptionbudgets"): {"create"},
    ("slinky.slurm.net", "nodesets"): {"list", "watch", "patch"},
    ("slinky.slurm.net", "tokens"): {"list", "watch"},
    ("slinky.slurm.net", "nodesets/status"): {"patch"},
    ("slinky.slurm.net", "tokens/status"): {"patch"},
    ("slinky.slurm.net", "nodesets/finalizers"): {"update"},
    ("slinky.slurm.net", "tokens/finalizers"): {"update"},
    ("slinky.slurm.net", "controllers"): {"get", "list", "watch"},
    ("slinky.slurm.net", "restapis"): {"get", "list", "watch"},
    ("slinky.slurm.net", "accountings"): {"list", "watch"},
    ("slinky.slurm.net", "loginsets"): {"list", "watch"},
    ("slinky.slurm.net", "controllers/status"): {"patch"},
    ("slinky.slurm.net", "restapis/status"): {"patch"},
    ("slinky.slurm.net", "accountings/status"): {"patch"},
    ("slinky.slurm.net", "loginsets/status"): {"patch"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch"},
    ("", "services"): {"get", "create", "patch"},
    ("", "endpoints"): {"get"},
    ("apps", "statefulsets"): {"get", "list", "watch", "create", "patch"},
    ("apps", "deployments"): {"get", "list", "watch", "create", "patch"},
}
CLUSTER_RULES: dict[tuple[str, str], set[str]] = {("", "nodes"): {"list", "watch"}}
OPERATOR_SOURCES = [
    *sorted(str(p.relative_to(REPO)) for p in (REPO / "workers" / "operator").rglob("*.py")),
    "activities/cluster.py",
    "activities/nodeset.py",
    "slinky/clients/events.py",
    "slinky/clients/leader.py",
]


def _docs(texts: list[str]) -> list[Obj]:
    return [d for text in texts for d in yaml.safe_load_all(text) if d]


def render(
    values: dict[str, Any] | None = None,
    *,
    name: str = "slinky-operator",
    namespace: str = "slinky",
    kube_version: str | None = None,
) -> list[Obj]:
    """The chart's objects: with Helm's offline defaults (Kubernetes 1.36), or as `helm template --kube-version`
    (a client-only dry-run install, which the 0.2.2 wrapper exposes only through its ABI)."""
    if kube_version is None:
        with helm.Chart.load(str(CHART)) as chart:
            manifests = chart.render(values or {}, name=name, namespace=namespace)
        return _docs([text for path, text in sorted(manifests.items()) if not path.endswith("NOTES.txt")])
    opts = {"dry_run": "client", "kube_version": kube_version, "namespace": namespace}
    with helm.Config(kube_apiserver="https://127.0.0.1:1", kube_insecure_skip_tls_verify=True) as offline:
        payload = _native.call_string(
            "helm_install",
            offline._raw(),
            _native.HANDLE(0),
            _native.HANDLE(0),
            str(CHART),
            name,
            json.dumps(values or {}),
            json.dumps(opts),
        )
    return _docs([json.loads(payload)["manifest"]])


def by_kind(docs: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}


def container_of(objs: dict[tuple[str, str, str], Obj], namespace: str = "slinky") -> Obj:
    """The operator's container (not the webhook's: its Deployment is `<fullname>-webhook`)."""
    deploys = [
        o
        for (kind, ns, name), o in objs.items()
        if kind == "Deployment" and ns == namespace and not name.endswith("-webhook")
    ]
    [deploy] = deploys
    [container] = deploy["spec"]["template"]["spec"]["containers"]
    return dict(container)


def settings_from(container: Obj, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The operator's settings as its pod would read them (valueFrom entries need a pod: left out)."""
    for env in container["env"]:
        if "value" in env:
            monkeypatch.setenv(env["name"], env["value"])
    return Settings()


def rules_of(role: Obj) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs of a (Cluster)Role whose rules name no resourceNames."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "resourceNames" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


# ------------------------------------------------------------------------------------------ offline
def test_render_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    started = time.perf_counter()
    objs = by_kind(render())
    elapsed = time.perf_counter() - started
    assert elapsed < 5, f"render took {elapsed:.2f}s"
    assert set(objs) == {
        ("ServiceAccount", "slinky", "slinky-operator"),
        ("ClusterRole", "", "slinky-operator"),
        ("ClusterRoleBinding", "", "slinky-operator"),
        ("Role", "slinky", "slinky-operator-leader-election"),
        ("RoleBinding", "slinky", "slinky-operator-leader-election"),
        ("Deployment", "slinky", "slinky-operator"),
        ("Secret", "slinky", "slinky-operator-webhook-tls"),
        ("Service", "slinky", "slinky-operator-webhook"),
        ("Deployment", "slinky", "slinky-operator-webhook"),
        ("ValidatingWebhookConfiguration", "", "slinky-operator"),
    }
    deploy = objs[("Deployment", "slinky", "slinky-operator")]
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "slinky-operator"
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    container = container_of(objs)
    assert container["image"] == "localhost/slinky-temporal:0.1.0"
    assert container["args"] == ["-m", "workers.operator"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["ports"] == [
        {"name": "metrics", "containerPort": 8080, "protocol": "TCP"},
        {"name": "sdk-metrics", "containerPort": 8081, "protocol": "TCP"},
        {"name": "health", "containerPort": 8082, "protocol": "TCP"},
    ]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    env = {e["name"]: e for e in container["env"]}
    assert env["SLINKY_LEADER_ELECTION__IDENTITY"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}

    settings = settings_from(container, monkeypatch)
    ops = settings.operator
    assert (settings.temporal.address, settings.temporal.namespace) == (
        "temporal-frontend.temporal.svc:7233",
        "default",
    )
    assert (ops.task_queue, ops.rest_url, ops.namespaces, ops.workers, ops.token_workers) == (
        "slinky-operator",
        "http://slurm-restapi.slurm:6820",
        [],
        4,
        2,
    )
    assert (ops.node_poll_seconds, ops.scale_in_fallback_seconds, ops.lease_name) == (1, 60, "slinky-operator")
    election = settings.leader_election
    assert (election.enabled, election.namespace) == (True, "slinky")
    assert (election.lease_seconds, election.renew_deadline_seconds, election.retry_seconds) == (15, 10, 2)
    telemetry = settings.telemetry
    assert (telemetry.log_json, telemetry.log_level, telemetry.metrics_port) == (True, "INFO", 8080)
    assert telemetry.metrics_address == "0.0.0.0"


def test_other_values_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {
        "image": {"repository": "registry.example/hpc/slinky-temporal", "tag": "1.2.3", "pullPolicy": "Always"},
        "temporal": {"address": "temporal.example:7233", "namespace": "hpc", "taskQueue": "ops-b"},
        "slurm": {"restUrl": "https://slurmrestd.example:6820"},
        "operator": {
            "replicas": 3,
            "nodesetWorkers": 8,
            "tokenWorkers": 3,
            "nodePollSeconds": 0.5,
            "scaleInFallbackSeconds": 30,
            "namespaces": " team-a, team-b ,team-a",  # upstream's comma-separated form
            "logLevel": "debug",
            "logJson": False,
            "metricsPort": 0,
            "healthPort": 0,
            "leaderElectionTiming": {"leaseSeconds": 30, "renewDeadlineSeconds": 20, "retrySeconds": 4},
            "extraEnv": [{"name": "SLINKY_SLURM__TIMEOUT_SECONDS", "value": "3"}],
            "serviceAccount": {"name": "ops", "annotations": {"example.org/role": "x"}},
            "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "priorityClassName": "system-cluster-critical",
        "imagePullSecrets": [{"name": "pull"}],
        "podLabels": {"team": "hpc"},
    }
    objs = by_kind(render(values, name="ops-b", namespace="hpc-system"))
    deploy = objs[("Deployment", "hpc-system", "ops-b-slinky-operator")]
    assert deploy["spec"]["replicas"] == 3
    pod = deploy["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "hpc"
    assert pod["spec"]["serviceAccountName"] == "ops"
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "pull"}]
    assert pod["spec"]["tolerations"][0]["key"] == "infra"
    assert objs[("ServiceAccount", "hpc-system", "ops")]["metadata"]["annotations"] == {"example.org/role": "x"}
    container = container_of(objs, "hpc-system")
    assert (container["image"], container["imagePullPolicy"]) == (
        "registry.example/hpc/slinky-temporal:1.2.3",
        "Always",
    )
    assert "ports" not in container and "livenessProbe" not in container

    settings = settings_from(container, monkeypatch)
    ops = settings.operator
    assert (settings.temporal.address, settings.temporal.namespace, ops.task_queue) == (
        "temporal.example:7233",
        "hpc",
        "ops-b",
    )
    assert ops.rest_url == "https://slurmrestd.example:6820"
    assert ops.namespaces == ["team-a", "team-b"]
    assert (ops.workers, ops.token_workers, ops.node_poll_seconds, ops.scale_in_fallback_seconds) == (8, 3, 0.5, 30)
    assert ops.lease_name == "ops-b-slinky-operator"
    election = settings.leader_election
    assert (election.namespace, election.lease_seconds, election.renew_deadline_seconds, election.retry_seconds) == (
        "hpc-system",
        30,
        20,
        4,
    )
    assert (settings.telemetry.log_level, settings.telemetry.log_json, settings.telemetry.metrics_port) == (
        "DEBUG",
        False,
        None,
    )
    assert settings.slurm.timeout_seconds == 3
    # The leader-election Role follows the Lease name.
    role = objs[("Role", "hpc-system", "ops-b-slinky-operator-leader-election")]
    assert role["rules"][1]["resourceNames"] == ["ops-b-slinky-operator"]


def test_rbac_cluster_wide_is_exactly_what_the_code_needs() -> None:
    objs = by_kind(render())
    assert rules_of(objs[("ClusterRole", "", "slinky-operator")]) == {**CLUSTER_RULES, **NAMESPACED_RULES}
    binding = objs[("ClusterRoleBinding", "", "slinky-operator")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slinky-operator", "namespace": "slinky"}]
    # Leader election: create the Lease, then get and update only that one.
    role = objs[("Role", "slinky", "slinky-operator-leader-election")]
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["slinky-operator"],
            "verbs": ["get", "update"],
        },
    ]


def test_rbac_covers_every_api_the_operator_calls() -> None:
    """Every Kubernetes resource named in an API path of the operator's code has a rule; the slinky.slurm.net
    resources are the CRDs' plurals. A new call fails here until the chart grants it."""
    api = re.compile(r"/api/v1/(?:namespaces/\{[^}]*\}/)?([a-z]+)")
    apis = re.compile(r"/apis/([a-z0-9.-]+)/v[0-9a-z]+/(?:namespaces/\{[^}]*\}/)?([a-z]+)")
    called: set[tuple[str, str]] = set()
    for source in OPERATOR_SOURCES:
        text = (REPO / source).read_text()
        called |= {("", m.group(1)) for m in api.finditer(text) if m.group(1) != "namespaces"}
        called |= {(m.group(1), m.group(2)) for m in apis.finditer(text)}
    assert ("slinky.slurm.net", "nodesets") in called  # the scan sees something
    granted = {
        **CLUSTER_RULES,
        **NAMESPACED_RULES,
        ("coordination.k8s.io", "leases"): {"create", "get", "update"},
        ("authorization.k8s.io", "subjectaccessreviews"): {"create"},  # externalMetrics.enabled
    }
    assert called - set(granted) == set()

    plurals = set()
    for crd in (REPO / "deploy" / "crds" / "slinky").glob("*.yaml"):
        spec = yaml.safe_load(crd.read_text())["spec"]
        plurals.add((spec["group"], spec["names"]["plural"]))
    for group, resource in granted:
        if group == "slinky.slurm.net":
            assert (group, resource.split("/")[0]) in plurals


def test_rbac_scoped_to_namespaces_uses_roles(monkeypatch: pytest.MonkeyPatch) -> None:
    objs = by_kind(render({"operator": {"namespaces": ["team-a", "team-b"]}}))
    assert rules_of(objs[("ClusterRole", "", "slinky-operator")]) == CLUSTER_RULES
    for ns in ("team-a", "team-b"):
        assert rules_of(objs[("Role", ns, "slinky-operator")]) == NAMESPACED_RULES
        binding = objs[("RoleBinding", ns, "slinky-operator")]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "slinky-operator",
        }
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slinky-operator", "namespace": "slinky"}]
    assert not [key for key in objs if key[0] == "Role" and key[1] not in ("team-a", "team-b", "slinky")]
    assert settings_from(container_of(objs), monkeypatch).operator.namespaces == ["team-a", "team-b"]


def test_leader_election_off(monkeypatch: pytest.MonkeyPatch) -> None:
    objs = by_kind(render({"operator": {"leaderElection": False, "replicas": 1}}))
    assert ("Role", "slinky", "slinky-operator-leader-election") not in objs
    container = container_of(objs)
    names = {e["name"] for e in container["env"]}
    assert "SLINKY_LEADER_ELECTION__IDENTITY" not in names
    assert settings_from(container, monkeypatch).leader_election.enabled is False


def test_existing_service_account() -> None:
    objs = by_kind(render({"operator": {"serviceAccount": {"create": False, "name": "ops"}}}))
    assert not [key for key in objs if key[0] == "ServiceAccount"]
    assert objs[("ClusterRoleBinding", "", "slinky-operator")]["subjects"][0]["name"] == "ops"
    assert (
        container_of(objs)
        and objs[("Deployment", "slinky", "slinky-operator")]["spec"]["template"]["spec"]["serviceAccountName"] == "ops"
    )


def test_pod_disruption_budget() -> None:
    def pdb(values: dict[str, Any], kube_version: str | None = None) -> Obj | None:
        found = [d for d in render(values, kube_version=kube_version) if d["kind"] == "PodDisruptionBudget"]
        return found[0] if found else None

    assert pdb({}) is None
    assert pdb({"operator": {"pdb": {"enabled": True}, "replicas": 1}}) is None  # would block every drain
    on = {"operator": {"pdb": {"enabled": True}}}
    modern = pdb(on)
    assert modern is not None
    assert (modern["apiVersion"], modern["spec"]["minAvailable"]) == ("policy/v1", 1)
    assert modern["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    old = pdb(on, kube_version="v1.20.2")
    assert old is not None and old["apiVersion"] == "policy/v1beta1"
    by_max = pdb({"operator": {"pdb": {"enabled": True, "minAvailable": "", "maxUnavailable": "50%"}}})
    assert by_max is not None and by_max["spec"] == {
        "maxUnavailable": "50%",
        "selector": modern["spec"]["selector"],
    }
    with pytest.raises(helm.HelmError, match="not both"):
        render({"operator": {"pdb": {"enabled": True, "minAvailable": 1, "maxUnavailable": 1}}})


def test_leader_election_timing_must_be_ordered() -> None:
    timing = {"leaseSeconds": 10, "renewDeadlineSeconds": 10, "retrySeconds": 2}
    with pytest.raises(helm.HelmError, match="retrySeconds < renewDeadlineSeconds < leaseSeconds"):
        render({"operator": {"leaderElectionTiming": timing}})
    render({"operator": {"leaderElectionTiming": timing, "leaderElection": False}})


def test_the_webhook_is_registered_for_the_six_kinds_on_its_own_certificate() -> None:
    """CREATE and UPDATE of the resources only (not their /status, never DELETE: upstream #189), Fail as
    upstream, the caBundle the CA of the certificate the Deployment mounts; `webhook.enabled=false`: none of it."""
    objs = by_kind(render())
    (hook,) = objs[("ValidatingWebhookConfiguration", "", "slinky-operator")]["webhooks"]
    assert hook["name"] == "validate.slinky.slurm.net" and hook["failurePolicy"] == "Fail"
    (rule,) = hook["rules"]
    assert rule["operations"] == ["CREATE", "UPDATE"] and rule["apiGroups"] == ["slinky.slurm.net"]
    assert sorted(rule["resources"]) == ["accountings", "controllers", "loginsets", "nodesets", "restapis", "tokens"]
    service = hook["clientConfig"]["service"]
    assert (service["name"], service["namespace"], service["path"]) == (
        "slinky-operator-webhook",
        "slinky",
        "/validate",
    )
    secret = objs[("Secret", "slinky", "slinky-operator-webhook-tls")]
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    deploy = objs[("Deployment", "slinky", "slinky-operator-webhook")]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert container["args"][:2] == ["-m", "workers.operator.webhook"]
    assert deploy["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == "slinky-operator-webhook-tls"
    assert not [k for k in by_kind(render({"webhook": {"enabled": False}})) if "webhook" in k[2]]
    scoped = by_kind(render({"webhook": {"namespaceSelector": {"matchLabels": {"team": "a"}}}}))
    (hook,) = scoped[("ValidatingWebhookConfiguration", "", "slinky-operator")]["webhooks"]
    assert hook["namespaceSelector"] == {"matchLabels": {"team": "a"}}


def test_crds_enabled_brings_the_generated_crds_as_templates_kept_on_uninstall() -> None:
    """The CRDs are deploy/crds/slinky/ (generated, `make crds`) through the slinky-operator-crds subchart, as
    templates (Helm's crds/ folder is installed once and never upgraded); off by default, as upstream."""
    with helm.Chart.load(str(CHART)) as chart:
        assert chart.crds == []
    assert not [d for d in render() if d["kind"] == "CustomResourceDefinition"]
    generated = {
        d["metadata"]["name"]: d
        for p in sorted((REPO / "deploy" / "crds" / "slinky").glob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text())
        if d
    }
    assert len(generated) == 6
    crds = {
        d["metadata"]["name"]: d for d in render({"crds": {"enabled": True}}) if d["kind"] == "CustomResourceDefinition"
    }
    assert crds.keys() == generated.keys()
    for name, crd in crds.items():
        assert crd["spec"] == generated[name]["spec"], name
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    unkept = [d for d in render({"crds": {"enabled": True, "keep": False}}) if d["kind"] == "CustomResourceDefinition"]
    assert all("helm.sh/resource-policy" not in (d["metadata"].get("annotations") or {}) for d in unkept)


@pytest.mark.parametrize(
    ("values", "pointer"),
    [
        ({"temporal": {"address": "no-port"}}, "/temporal/address"),
        ({"slurm": {"restUrl": "slurmrestd:6820"}}, "/slurm/restUrl"),
        ({"operator": {"replicas": -1}}, "/operator/replicas"),
        ({"operator": {"nodesetWorkers": 0}}, "/operator/nodesetWorkers"),
        ({"operator": {"logLevel": "verbose"}}, "/operator/logLevel"),
        ({"operator": {"namespaces": ["Not_A_Namespace"]}}, "/operator/namespaces"),
        ({"operator": {"namespaces": "a;b"}}, "/operator/namespaces"),
        ({"operator": {"leaderElection": "yes"}}, "/operator/leaderElection"),
        ({"operator": {"pdb": {"minAvailable": "half"}}}, "/operator/pdb/minAvailable"),
        ({"operator": {"tokenWorkers": 0}}, "/operator/tokenWorkers"),
        ({"temporl": {}}, "temporl"),
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any], pointer: str) -> None:
    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema({})
        with pytest.raises(helm.HelmValuesError, match=pointer):
            chart.validate_schema(values)
        with pytest.raises(helm.HelmValuesError):
            chart.render(values, name="slinky-operator", namespace="slinky")


NON_DEFAULT: dict[str, Any] = {
    "operator": {
        "namespaces": ["team-a", "team-b"],
        "pdb": {"enabled": True},
        "metricsPort": 0,
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "slinky-operator"}},
            }
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "infra", "operator": "Exists"}]}]
                }
            }
        },
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "extraEnv": [{"name": "SLINKY_SLURM__TIMEOUT_SECONDS", "value": "3"}],
    },
    "podAnnotations": {"example.org/scrape": "false"},
}


@pytest.mark.parametrize("values", [{}, NON_DEFAULT, {"operator": {"leaderElection": False, "replicas": 1}}])
def test_lint_strict_for_kubernetes_1_20(values: dict[str, Any]) -> None:
    result = helm.lint(str(CHART), values=values, strict=True, kube_version="v1.20.2")
    assert result["errors"] == []
    # Severity 1 is informational (e.g. "icon is recommended"); strict mode turns warnings into errors.
    assert [m for m in result["messages"] if m["severity"] > 1] == []


@pytest.mark.parametrize(
    "values",
    [
        {},
        NON_DEFAULT,
        {"operator": {"leaderElection": False, "replicas": 1, "serviceAccount": {"create": False}}},
        {"operator": {"pdb": {"enabled": True, "minAvailable": "", "maxUnavailable": "50%"}}},
        {"exporter": {"enabled": True, "jwtSecret": {"name": "slurm-token", "key": "auth-token"}}},
        {"externalMetrics": {"enabled": True, "tlsSecret": "em-tls", "caBundle": "Q0E="}},
    ],
)
# kubernetes-validate's bundled schemas name a $schema that jsonschema does not know (harmless).
@pytest.mark.filterwarnings("ignore:The metaschema specified by .schema was not found:DeprecationWarning")
def test_manifests_match_kubernetes_1_20_schemas(values: dict[str, Any]) -> None:
    assert_valid_for_1_20(render(values, kube_version="v1.20.2"))


def test_the_exporter_value_runs_python_m_workers_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    """`exporter.enabled`: a Deployment and Service of its own running the exporter against `exporter.restUrl`
    with the JWT from `exporter.jwtSecret`; off by default; a missing Secret name is refused at render."""
    assert not [d for d in render() if "exporter" in d["metadata"]["name"]]
    values = {"exporter": {"enabled": True, "restUrl": "http://rest.hpc:6820", "jwtSecret": {"name": "tok"}}}
    objs = by_kind(render(values))
    deploy = objs[("Deployment", "slinky", "slinky-operator-exporter")]
    [container] = deploy["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["-m", "workers.exporter"]
    settings = settings_from(container, monkeypatch)
    assert settings.slurm.rest_url == "http://rest.hpc:6820"
    assert settings.slurm.jwt_file == "/var/run/slinky/slurm-jwt/auth-token"
    assert (settings.exporter.address, settings.exporter.port, settings.exporter.poll_seconds) == ("0.0.0.0", 8080, 5)
    assert deploy["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == "tok"
    service = objs[("Service", "slinky", "slinky-operator-exporter")]
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "exporter"
    operator = objs[("Deployment", "slinky", "slinky-operator")]
    assert operator["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    with pytest.raises(Exception, match=r"jwtSecret\.name"):
        render({"exporter": {"enabled": True}})


def test_the_external_metrics_value_registers_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """`externalMetrics.enabled`: the operator serves on its port with the TLS Secret's certificate and knows its
    pod; a Service selecting only the serving (leader) pod; the APIService with the caBundle; RBAC for the
    SubjectAccessReviews, the front proxy's CA, its own pod's label and the HPA controller's reads. Refused
    without a certificate."""
    values = {"externalMetrics": {"enabled": True, "tlsSecret": "em-tls", "caBundle": "Q0E="}}
    objs = by_kind(render(values))
    container = container_of(objs)
    settings = settings_from(container, monkeypatch)
    assert settings.operator.external_metrics_port == 6443 and settings.operator.external_metrics_address == "0.0.0.0"
    assert settings.operator.external_metrics_cert_file == "/var/run/slinky/external-metrics/tls.crt"
    assert {e["name"] for e in container["env"] if "valueFrom" in e} >= {
        "SLINKY_OPERATOR__POD_NAME",
        "SLINKY_OPERATOR__POD_NAMESPACE",
    }
    service = objs[("Service", "slinky", "slinky-operator-external-metrics")]
    assert service["spec"]["selector"]["slinky.slurm.net/external-metrics"] == "serving"
    api = objs[("APIService", "", "v1beta1.external.metrics.k8s.io")]
    assert api["spec"]["service"] == {"namespace": "slinky", "name": "slinky-operator-external-metrics", "port": 443}
    assert api["spec"]["caBundle"] == "Q0E="
    sar = objs[("ClusterRole", "", "slinky-operator-external-metrics")]
    assert rules_of(sar) == {("authorization.k8s.io", "subjectaccessreviews"): {"create"}}
    reader = objs[("RoleBinding", "kube-system", "slinky-operator-auth-reader")]
    assert reader["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    hpa = objs[("ClusterRoleBinding", "", "slinky-operator-external-metrics-reader")]
    assert hpa["subjects"] == [
        {"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler", "namespace": "kube-system"}
    ]
    assert not [k for k in by_kind(render()) if "external-metrics" in k[2]], "off by default"
    with pytest.raises(Exception, match="tlsSecret"):
        render({"externalMetrics": {"enabled": True}})


# ------------------------------------------------------------------------------------------ live
def test_install_upgrade_uninstall(dev_env: dict[str, str]) -> None:
    from kubernetes import client, config

    suffix = uuid.uuid4().hex[:6]
    release, namespace, watched = f"chart-op-{suffix}", f"chart-op-{suffix}", f"chart-op-watch-{suffix}"
    fullname = f"{release}-slinky-operator"
    sa_user = f"system:serviceaccount:{namespace}:{fullname}"
    values: dict[str, Any] = {
        "image": {"pullPolicy": "Never"},
        # Its pods land on the simulated nodes here and never serve: the webhook (with failurePolicy Fail) would
        # refuse every custom resource of the cluster. tests/integration/test_real_cluster.py runs it for real.
        "webhook": {"enabled": False},
        "temporal": {"taskQueue": f"chart-test-{suffix}"},
        "operator": {"namespaces": [watched], "leaderElection": True, "replicas": 2},
    }
    api = config.new_client_from_config(config_file=dev_env["KUBECONFIG"])
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    rbac, authz = client.RbacAuthorizationV1Api(api), client.AuthorizationV1Api(api)
    custom = client.CustomObjectsApi(api)  # policy/v1beta1 has no typed API in this client

    def allowed(verb: str, resource: str, ns: str = "", *, group: str = "", sub: str = "", name: str = "") -> bool:
        attrs = client.V1ResourceAttributes(
            verb=verb, resource=resource, group=group, subresource=sub or None, namespace=ns or None, name=name or None
        )
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(user=sa_user, resource_attributes=attrs)
        )
        return bool(authz.create_subject_access_review(review).status.allowed)

    # The watched namespace exists before the install (its Role lives there); nobody else uses it.
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=watched)))
    with helm.Config(kubeconfig_path=dev_env["KUBECONFIG"], namespace=namespace) as cfg:
        cfg.check_reachable()
        try:
            started = time.perf_counter()
            cfg.install(str(CHART), release, values, create_namespace=True, timeout=60)
            install_seconds = time.perf_counter() - started
            assert cfg.status(release)["status"] == "deployed"
            assert install_seconds < 20, f"install took {install_seconds:.2f}s"

            deploy = apps.read_namespaced_deployment(fullname, namespace)
            assert deploy.spec.replicas == 2
            env = {e.name: e.value for e in deploy.spec.template.spec.containers[0].env}
            assert env["SLINKY_OPERATOR__NAMESPACES"] == json.dumps([watched])
            assert env["SLINKY_LEADER_ELECTION__ENABLED"] == "true"
            assert env["SLINKY_OPERATOR__LEASE_NAME"] == fullname
            assert core.read_namespaced_service_account(fullname, namespace)
            assert rbac.read_cluster_role(fullname).rules[0].resources == ["nodes"]
            assert rbac.read_namespaced_role(fullname, watched)
            assert rbac.read_namespaced_role_binding(fullname, watched).subjects[0].namespace == namespace
            assert rbac.read_namespaced_role(f"{fullname}-leader-election", namespace)

            # What the apiserver lets the ServiceAccount do: the code's needs in the watched namespace only.
            assert allowed("watch", "nodes") and not allowed("get", "nodes") and not allowed("patch", "nodes")
            assert allowed("create", "pods", watched) and allowed("delete", "pods", watched)
            assert allowed("patch", "pods", watched, sub="status")
            assert allowed("list", "secrets", watched) and allowed("create", "secrets", watched)
            assert allowed("patch", "nodesets", watched, group="slinky.slurm.net", sub="status")
            assert allowed("get", "controllers", watched, group="slinky.slurm.net")
            assert allowed("create", "poddisruptionbudgets", watched, group="policy")
            assert not allowed("list", "pods", "default") and not allowed("get", "secrets", "default")
            assert not allowed("list", "nodesets", "default", group="slinky.slurm.net")
            assert not allowed("update", "secrets", watched) and not allowed("delete", "secrets", watched)
            assert allowed("update", "leases", namespace, group="coordination.k8s.io", name=fullname)
            assert not allowed("update", "leases", namespace, group="coordination.k8s.io", name="someone-else")

            # Upgrade: settings follow, the PDB (policy/v1beta1 on this 1.20 server) comes.
            upgraded = {**values, "operator": {**values["operator"], "nodesetWorkers": 6, "pdb": {"enabled": True}}}
            cfg.upgrade(str(CHART), release, upgraded, timeout=60)
            assert cfg.status(release)["revision"] == 2
            deploy = apps.read_namespaced_deployment(fullname, namespace)
            env = {e.name: e.value for e in deploy.spec.template.spec.containers[0].env}
            assert env["SLINKY_OPERATOR__WORKERS"] == "6"
            pdb = custom.get_namespaced_custom_object("policy", "v1beta1", namespace, "poddisruptionbudgets", fullname)
            assert pdb["spec"]["minAvailable"] == 1
        finally:
            if any(r["name"] == release for r in cfg.list()):
                cfg.uninstall(release, timeout=60)
            core.delete_namespace(namespace)
            core.delete_namespace(watched)

    gone = client.exceptions.ApiException
    with pytest.raises(gone):
        rbac.read_cluster_role(fullname)
    with pytest.raises(gone):
        rbac.read_cluster_role_binding(fullname)
    with pytest.raises(gone):
        rbac.read_namespaced_role(fullname, watched)
    leftovers = [r.metadata.name for r in rbac.list_cluster_role().items if r.metadata.name.startswith(release)]
    assert leftovers == []
    api.close()
