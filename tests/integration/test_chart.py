"""The Helm chart deploy/charts/slinky-bridge with the real Helm v4 engine (helm-python-sdk).

Offline: render, values schema, ``helm lint --strict`` for Kubernetes 1.20, every rendered object against the
Kubernetes 1.20 OpenAPI schemas (kubernetes-validate, strict). Live: install into a fresh namespace of the dev
stack's kube-apiserver, check the objects, upgrade (the webhook certificate is kept), uninstall.

The installed webhook configurations must not disturb the dev stack's own webhook or other tests: the
release has its own name, its webhooks only see namespaces labelled with a key no namespace carries, and
every failure policy is Ignore. The stack's kube-scheduler places the release's pods on its worker nodes,
where the node agent runs them simulated; nothing here waits for them.
"""

from __future__ import annotations

import base64
import time
import uuid
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from slinky.config import Settings
from tests.integration.charts import assert_valid_for_1_20

pytestmark = pytest.mark.integration

CHART = Path(__file__).resolve().parents[2] / "deploy" / "charts" / "slinky-bridge"
KUBE_VERSION = "1.20.0"
NEVER_LABEL = "slinky.slurm.net/chart-test-never"
SAFE_VALUES: dict[str, Any] = {
    "managedNamespaces": ["chart-test-unmanaged"],
    "webhook": {"onlyNamespacesLabelled": NEVER_LABEL, "managedFailurePolicy": "Ignore"},
    "image": {"pullPolicy": "Never"},
}

Obj = dict[str, Any]


def render(
    values: dict[str, Any] | None = None, *, name: str = "slinky-bridge", namespace: str = "slinky"
) -> list[Obj]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values or {}, name=name, namespace=namespace)
    docs: list[Obj] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def by_kind(docs: list[Obj]) -> dict[tuple[str, str], Obj]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def args_of(deploy: Obj) -> list[str]:
    args: list[str] = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


# ------------------------------------------------------------------------------------------ offline
def test_render_defaults() -> None:
    started = time.perf_counter()
    objs = by_kind(render())
    elapsed = time.perf_counter() - started
    assert elapsed < 5, f"render took {elapsed:.2f}s"
    assert set(objs) == {
        ("ServiceAccount", "slinky-bridge"),
        ("ClusterRole", "slinky-bridge"),
        ("ClusterRoleBinding", "slinky-bridge"),
        ("Role", "slinky-bridge-leader-election"),
        ("RoleBinding", "slinky-bridge-leader-election"),
        ("ConfigMap", "slinky-bridge"),
        ("Deployment", "slinky-bridge-bridge"),
        ("Secret", "slinky-bridge-webhook-tls"),
        ("Service", "slinky-bridge-webhook"),
        ("Deployment", "slinky-bridge-webhook"),
        ("MutatingWebhookConfiguration", "slinky-bridge-pods.slinky.slurm.net"),
        ("ValidatingWebhookConfiguration", "slinky-bridge-pods.slinky.slurm.net"),
    }
    bridge = objs[("Deployment", "slinky-bridge-bridge")]
    pod = bridge["spec"]["template"]
    assert args_of(bridge) == ["-m", "workers"]
    assert pod["metadata"]["annotations"]["checksum/config"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert pod["spec"]["automountServiceAccountToken"] is False  # the token comes from kube-api-access
    sources = volumes["kube-api-access"]["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}
    assert volumes["slurm-jwt"]["secret"] == {
        "secretName": "slurm-bridge-token",
        "items": [{"key": "auth-token", "path": "auth-token"}],
    }
    config = objs[("ConfigMap", "slinky-bridge")]["data"]
    assert config["SLURM_JWT_FILE"] == "/var/run/secrets/slurm/auth-token"
    assert config["SLINKY_BRIDGE__MANAGED_NAMESPACES"] == '["slurm-bridge"]'
    assert config["SLINKY_TELEMETRY__METRICS_PORT"] == "9090"

    webhook = objs[("Deployment", "slinky-bridge-webhook")]
    assert "--bridge-username=system:serviceaccount:slinky:slinky-bridge" in args_of(webhook)
    assert "--managed-namespace=slurm-bridge" in args_of(webhook)
    service = objs[("Service", "slinky-bridge-webhook")]
    assert service["spec"]["ports"][0]["port"] == 443

    # One CA: the Secret's ca.crt is every webhook's caBundle.
    secret = objs[("Secret", "slinky-bridge-webhook-tls")]
    mutating = objs[("MutatingWebhookConfiguration", "slinky-bridge-pods.slinky.slurm.net")]
    validating = objs[("ValidatingWebhookConfiguration", "slinky-bridge-pods.slinky.slurm.net")]
    for hook in mutating["webhooks"] + validating["webhooks"]:
        assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
        excluded = hook["namespaceSelector"]["matchExpressions"][1]
        assert excluded["operator"] == "NotIn"
        assert {"kube-system", "kube-public", "kube-node-lease", "slinky"} <= set(excluded["values"])
    policies = {(c["kind"], h["name"]): h["failurePolicy"] for c in (mutating, validating) for h in c["webhooks"]}
    assert policies == {
        ("MutatingWebhookConfiguration", "managed.pods.slinky.slurm.net"): "Ignore",
        ("MutatingWebhookConfiguration", "scheduler.pods.slinky.slurm.net"): "Ignore",
        ("ValidatingWebhookConfiguration", "managed.pods.slinky.slurm.net"): "Fail",
        ("ValidatingWebhookConfiguration", "scheduler.pods.slinky.slurm.net"): "Ignore",
    }


def test_cert_manager_issues_and_injects_the_webhook_certificate() -> None:
    """With cert-manager the chart makes no key material: a Certificate into the webhook's Secret, the CA
    injected into both registrations, no checksum (renewals are reloaded by the webhook, not restarted)."""
    objs = by_kind(render({"webhook": {"tls": {"certManager": {"enabled": True}}}}))
    assert ("Secret", "slinky-bridge-webhook-tls") not in objs
    cert = objs[("Certificate", "slinky-bridge-webhook")]
    assert cert["spec"]["secretName"] == "slinky-bridge-webhook-tls"
    assert "slinky-bridge-webhook.slinky.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"] == {
        "name": "slinky-bridge-webhook-ca",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert objs[("Certificate", "slinky-bridge-webhook-ca")]["spec"]["isCA"] is True
    assert objs[("Issuer", "slinky-bridge-webhook-selfsigned")]["spec"] == {"selfSigned": {}}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = objs[(kind, "slinky-bridge-pods.slinky.slurm.net")]
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "slinky/slinky-bridge-webhook"
        assert all("caBundle" not in hook["clientConfig"] for hook in config["webhooks"])
    pod = objs[("Deployment", "slinky-bridge-webhook")]["spec"]["template"]["metadata"]
    assert "checksum/tls" not in pod["annotations"]

    # An existing (Cluster)Issuer: no CA of the chart's own.
    issuer = {"name": "corp-ca", "kind": "ClusterIssuer"}
    objs = by_kind(render({"webhook": {"tls": {"certManager": {"enabled": True, "issuerRef": issuer}}}}))
    assert objs[("Certificate", "slinky-bridge-webhook")]["spec"]["issuerRef"] == {**issuer, "group": "cert-manager.io"}
    assert not [key for key in objs if key[0] == "Issuer"]


def test_checksum_follows_the_config() -> None:
    def checksum(values: dict[str, Any]) -> str:
        deploy = by_kind(render(values))[("Deployment", "slinky-bridge-bridge")]
        value: str = deploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        return value

    base = checksum({})
    assert checksum({}) == base
    assert checksum({"slurm": {"restUrl": "http://slurm-other:6820"}}) != base


@pytest.mark.parametrize("enabled", [True, False])
def test_immediate_allocation_and_phantom_clearing_reach_the_worker_settings(
    enabled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {"slurm": {"immediateAllocation": enabled, "clearPhantomAllocations": not enabled}}
    config = by_kind(render(values))[("ConfigMap", "slinky-bridge")]["data"]
    for key, value in config.items():
        if key.startswith("SLINKY_SLURM__"):
            monkeypatch.setenv(key, value)
    assert Settings().slurm.immediate_allocation is enabled
    assert Settings().slurm.clear_phantom_allocations is not enabled


def test_leader_election_is_on_by_default_with_a_namespaced_lease_role(monkeypatch: pytest.MonkeyPatch) -> None:
    objs = by_kind(render())
    role = objs[("Role", "slinky-bridge-leader-election")]
    assert role["metadata"]["namespace"] == "slinky"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}
    ]
    binding = objs[("RoleBinding", "slinky-bridge-leader-election")]
    assert binding["subjects"][0]["name"] == "slinky-bridge"
    [container] = objs[("Deployment", "slinky-bridge-bridge")]["spec"]["template"]["spec"]["containers"]
    identity = {e["name"]: e for e in container["env"]}["SLINKY_LEADER_ELECTION__IDENTITY"]
    assert identity["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    for key, value in objs[("ConfigMap", "slinky-bridge")]["data"].items():
        if key.startswith("SLINKY_LEADER_ELECTION__"):
            monkeypatch.setenv(key, value)
    election = Settings().leader_election
    assert (election.enabled, election.namespace, election.name) == (True, "slinky", "slinky-bridge")
    assert (election.lease_seconds, election.renew_deadline_seconds, election.retry_seconds) == (15, 10, 2)


@pytest.mark.parametrize(
    ("values", "on"),
    [
        ({"bridge": {"replicas": 2}}, True),
        ({}, False),  # one replica: no followers
        ({"bridge": {"replicas": 2, "submitRelayPort": 0}}, False),
        ({"bridge": {"replicas": 2, "leaderElection": {"enabled": False}}}, False),
    ],
)
def test_the_submit_relay_is_on_with_several_replicas(
    values: dict[str, Any], on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Followers reach the leader's relay at its pod IP and the chart's port (docs/bridge.md, "Several replicas")."""
    objs = by_kind(render(values))
    [container] = objs[("Deployment", "slinky-bridge-bridge")]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    for key, value in objs[("ConfigMap", "slinky-bridge")]["data"].items():
        if key.startswith("SLINKY_WORKER__"):
            monkeypatch.setenv(key, value)
    if on:
        assert env["SLINKY_WORKER__SUBMIT_RELAY_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert ports["submit-relay"] == 9095 and Settings().worker.submit_relay_port == 9095
    else:
        assert "SLINKY_WORKER__SUBMIT_RELAY_HOST" not in env and "submit-relay" not in ports
        assert Settings().worker.submit_relay_port is None


def test_leader_election_off_renders_no_lease_role() -> None:
    objs = by_kind(render({"bridge": {"leaderElection": {"enabled": False}}}))
    assert ("Role", "slinky-bridge-leader-election") not in objs
    assert objs[("ConfigMap", "slinky-bridge")]["data"]["SLINKY_LEADER_ELECTION__ENABLED"] == "false"


def test_selector_replaces_the_namespace_list() -> None:
    objs = by_kind(render({"managedNamespaceSelector": {"hpc.example.org/slurm": "yes"}}))
    config = objs[("ConfigMap", "slinky-bridge")]["data"]
    assert config["SLINKY_BRIDGE__MANAGED_NAMESPACE_SELECTOR"] == "hpc.example.org/slurm=yes"
    validating = objs[("ValidatingWebhookConfiguration", "slinky-bridge-pods.slinky.slurm.net")]
    managed, others = validating["webhooks"]
    assert managed["namespaceSelector"]["matchExpressions"][-1] == {
        "key": "hpc.example.org/slurm",
        "operator": "In",
        "values": ["yes"],
    }
    assert others["namespaceSelector"]["matchExpressions"][-1]["operator"] == "NotIn"
    assert "--managed-namespace-selector=hpc.example.org/slurm=yes" in args_of(
        objs[("Deployment", "slinky-bridge-webhook")]
    )


@pytest.mark.parametrize(
    ("values", "pointer"),
    [
        ({"temporal": {"address": "no-port"}}, "/temporal/address"),
        ({"slurm": {"restUrl": "slurm:6820"}}, "/slurm/restUrl"),
        ({"bridge": {"replicas": -1}}, "/bridge/replicas"),
        ({"webhook": {"managedFailurePolicy": "Sometimes"}}, "/webhook/managedFailurePolicy"),
        ({"managedNamespaces": ["Not_A_Namespace"]}, "/managedNamespaces/0"),
        ({"schedulerNmae": "typo"}, "schedulerNmae"),
        (
            {"webhook": {"tls": {"certManager": {"issuerRef": {"name": "x", "kind": "Bogus"}}}}},
            "/webhook/tls/certManager/issuerRef/kind",
        ),
        ({"webhook": {"tls": {"certManager": {"duration": "90 days"}}}}, "/webhook/tls/certManager/duration"),
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any], pointer: str) -> None:
    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema({})
        with pytest.raises(helm.HelmValuesError, match=pointer):
            chart.validate_schema(values)
        with pytest.raises(helm.HelmValuesError):
            chart.render(values, name="slinky-bridge", namespace="slinky")


def test_lint_strict_for_kubernetes_1_20() -> None:
    result = helm.lint(str(CHART), strict=True, kube_version="v1.20.2")
    assert result["errors"] == []
    # Severity 1 is informational (e.g. "icon is recommended"); strict mode turns warnings into errors.
    assert [m for m in result["messages"] if m["severity"] > 1] == []


@pytest.mark.parametrize(
    "values",
    [
        {},
        SAFE_VALUES,
        {"managedNamespaceSelector": {"a.example/b": "c"}, "bridge": {"metricsPort": 0, "replicas": 2}},
        {"bridge": {"replicas": 3}},
        {"webhook": {"enabled": False}},
    ],
)
# kubernetes-validate's bundled schemas name a $schema that jsonschema does not know (harmless).
@pytest.mark.filterwarnings("ignore:The metaschema specified by .schema was not found:DeprecationWarning")
def test_manifests_match_kubernetes_1_20_schemas(values: dict[str, Any]) -> None:
    assert_valid_for_1_20(render(values))


# ------------------------------------------------------------------------------------------ live
def test_install_upgrade_uninstall(dev_env: dict[str, str]) -> None:
    from kubernetes import client, config

    suffix = uuid.uuid4().hex[:6]
    release, namespace = f"chart-{suffix}", f"chart-test-{suffix}"
    hook_name = f"{release}-pods.slinky.slurm.net"
    api = config.new_client_from_config(config_file=dev_env["KUBECONFIG"])
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    rbac, adm = client.RbacAuthorizationV1Api(api), client.AdmissionregistrationV1Api(api)
    fullname = f"{release}-slinky-bridge"

    def tls_cert() -> str:
        data: str = core.read_namespaced_secret(f"{fullname}-webhook-tls", namespace).data["tls.crt"]
        return data

    with helm.Config(kubeconfig_path=dev_env["KUBECONFIG"], namespace=namespace) as cfg:
        cfg.check_reachable()
        try:
            started = time.perf_counter()
            cfg.install(str(CHART), release, SAFE_VALUES, create_namespace=True, timeout=60)
            install_seconds = time.perf_counter() - started
            assert cfg.status(release)["status"] == "deployed"

            assert {d.metadata.name for d in apps.list_namespaced_deployment(namespace).items} == {
                f"{fullname}-bridge",
                f"{fullname}-webhook",
            }
            service = core.read_namespaced_service(f"{fullname}-webhook", namespace)
            assert service.spec.ports[0].port == 443
            assert core.read_namespaced_service_account(fullname, namespace)
            role = rbac.read_cluster_role(fullname)
            assert {"pods/binding", "nodes", "podgroups/status"} <= {r for rule in role.rules for r in rule.resources}
            binding = rbac.read_cluster_role_binding(fullname)
            assert binding.subjects[0].namespace == namespace
            mutating = adm.read_mutating_webhook_configuration(hook_name)
            validating = adm.read_validating_webhook_configuration(hook_name)
            ca = base64.b64decode(core.read_namespaced_secret(f"{fullname}-webhook-tls", namespace).data["ca.crt"])
            for hook in mutating.webhooks + validating.webhooks:
                assert hook.failure_policy == "Ignore"
                assert hook.client_config.service.namespace == namespace
                assert base64.b64decode(hook.client_config.ca_bundle) == ca
                terms = {(e.key, e.operator) for e in hook.namespace_selector.match_expressions}
                assert (NEVER_LABEL, "Exists") in terms
            assert install_seconds < 30, f"install took {install_seconds:.2f}s"

            # Upgrade: a changed setting rolls the bridge, the webhook certificate is kept (lookup).
            cert = tls_cert()
            cfg.upgrade(str(CHART), release, {**SAFE_VALUES, "partition": "other"}, timeout=60)
            assert cfg.status(release)["revision"] == 2
            assert tls_cert() == cert
            configmap = core.read_namespaced_config_map(fullname, namespace)
            assert configmap.data["SLINKY_BRIDGE__PARTITION"] == "other"
        finally:
            if any(r["name"] == release for r in cfg.list()):
                cfg.uninstall(release, timeout=60)
            core.delete_namespace(namespace)

    gone = client.exceptions.ApiException
    with pytest.raises(gone):
        adm.read_mutating_webhook_configuration(hook_name)
    with pytest.raises(gone):
        adm.read_validating_webhook_configuration(hook_name)
    with pytest.raises(gone):
        rbac.read_cluster_role(fullname)
    with pytest.raises(gone):
        rbac.read_cluster_role_binding(fullname)
    api.close()
