"""deploy/ against the real control plane, the operator as deploy/'s ServiceAccount, and the alerts.

- the kustomization passes a server-side dry run (and a misspelled field does not);
- the operator Pod template is admitted under the `restricted` Pod Security Standard;
- the default install lets the operator read Secrets in no namespace (kube-system included) until
  a namespace is enabled with deploy/tools/job_namespaces.py, and then only there;
- the operator authenticates with a TokenRequest token of deploy/'s ServiceAccount, read from a
  non-default path, and completes a job with exactly deploy/'s RBAC plus its job namespace's
  RoleBinding; without the ClusterRoleBinding it cannot act on jobs at all;
- the PrometheusRule's alerts pass `promtool test rules` (tests/data/alerts/).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.brevsim.harness import BrevSim
from tests.devenv.controlplane import ControlPlane, kubectl_path
from tests.devenv.operator import (
    OPERATOR_NAMESPACE,
    SERVICE_ACCOUNT,
    OperatorProcess,
    install_operator_identity,
)
from tests.devenv.prometheus import PrometheusError, find_binary, rule_groups
from tests.devenv.s3 import S3Server
from tests.fixtures.operator import Stack

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROMETHEUS_OPERATOR_CRDS = REPO / "tests" / "data" / "prometheus-operator-crds.yaml"
ALERT_TESTS = REPO / "tests" / "data" / "alerts" / "taobrev-alerts.test.yaml"
# Where kubelet mounts a ServiceAccount token by default; the brev CLI would read it as its own token.
DEFAULT_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"
RBAC_KINDS = ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")
JOB_NAMESPACES_TOOL = DEPLOY / "tools" / "job_namespaces.py"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{SERVICE_ACCOUNT}"


def job_namespace_bindings(*namespaces: str) -> str:
    """What docs/install.md tells users to apply: the generator's RoleBindings."""
    return subprocess.run(
        [sys.executable, str(JOB_NAMESPACES_TOOL), *namespaces],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def operator_can(cp: ControlPlane, verb: str, resource: str, namespace: str) -> bool:
    """`kubectl auth can-i` as the operator's ServiceAccount (impersonated by the admin)."""
    answer = cp.kubectl(
        "auth", "can-i", verb, resource, "-n", namespace, f"--as={OPERATOR_USER}", check=False
    )
    assert answer.stdout.strip() in ("yes", "no"), answer.stderr
    return answer.stdout.strip() == "yes"


@pytest.fixture
def enabled_job_namespace(control_plane: ControlPlane, namespace: str) -> str:
    """The test namespace enabled for jobs the documented way, before the operator starts: its
    RoleBinding from deploy/tools/job_namespaces.py, plus deploy/components/namespaced-mode's
    grant, since the e2e operator runs with TAOBREV_NAMESPACES=<namespace>."""
    control_plane.kubectl("apply", "-f", str(DEPLOY / "components" / "namespaced-mode" / "rbac.yaml"))
    control_plane.kubectl("apply", "-f", "-", input=job_namespace_bindings(namespace))
    return namespace


@pytest.fixture(scope="module")
def deploy_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of the dry runs' own, with the Prometheus-operator CRDs deploy/monitoring
    needs and the operator namespace. Not the worker's shared one: what earlier tests left there
    changes the verdict (a log-API test's APIService with a caBundle makes deploy/'s
    `insecureSkipTLSVerify: true` invalid under server-side apply), and the first dry run must
    see a cluster where only the namespace exists."""
    cp = ControlPlane.start(tmp_path_factory.mktemp("deploy-plane"))
    try:
        cp.apply_crds(PROMETHEUS_OPERATOR_CRDS)
        ensure_operator_namespace(cp)
        yield cp
    finally:
        cp.stop()


def rendered(cp: ControlPlane, kustomization: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(cp.kubectl("kustomize", str(kustomization)).stdout) if d]


def server_dry_run(cp: ControlPlane, kustomization: Path) -> subprocess.CompletedProcess[str]:
    return cp.kubectl("apply", "--server-side", "--dry-run=server", "-k", str(kustomization), check=False)


def ensure_operator_namespace(cp: ControlPlane) -> None:
    # NamespaceLifecycle admission rejects objects in a namespace a dry run only pretended to
    # create, so it must exist (the install instructions create it before the Secret, too).
    if cp.kubectl("get", "namespace", OPERATOR_NAMESPACE, check=False).returncode != 0:
        cp.create_namespace(OPERATOR_NAMESPACE)


def test_deploy_kustomization_passes_a_server_side_dry_run(deploy_plane: ControlPlane) -> None:
    """`kubectl apply --server-side --dry-run=server -k deploy/` accepts every object: on the
    cluster as it is (run alone: only the namespace exists), and then over an install made with
    client-side `kubectl apply -k deploy/base` (what the e2e stack and many users do) without a
    field-manager conflict."""
    objects = rendered(deploy_plane, DEPLOY)
    kinds = {d["kind"] for d in objects}
    assert {"Deployment", "ServiceMonitor", "PrometheusRule", "ClusterRole"} <= kinds, kinds

    first = server_dry_run(deploy_plane, DEPLOY)
    assert first.returncode == 0, first.stderr + first.stdout
    assert first.stdout.count("serverside-applied (server dry run)") == len(objects), first.stdout

    deploy_plane.kubectl("apply", "-k", str(DEPLOY / "base"))
    upgrade = server_dry_run(deploy_plane, DEPLOY)
    assert upgrade.returncode == 0, upgrade.stderr + upgrade.stdout
    assert upgrade.stdout.count("serverside-applied (server dry run)") == len(objects), upgrade.stdout


@pytest.mark.parametrize("component", ["cluster-wide-secrets", "namespaced-mode"])
def test_each_opt_in_component_passes_a_server_side_dry_run(
    deploy_plane: ControlPlane, component: str, tmp_path: Path
) -> None:
    """An overlay of deploy/base plus one of deploy/components (what docs/install.md tells users
    to write) renders and is accepted by the API server, object for object."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                # kustomize takes relative paths only; they may climb out of the overlay.
                "resources": [os.path.relpath(DEPLOY / "base", overlay)],
                "components": [os.path.relpath(DEPLOY / "components" / component, overlay)],
            }
        )
    )
    objects = rendered(deploy_plane, overlay)
    assert len(objects) > len(rendered(deploy_plane, DEPLOY / "base"))
    result = server_dry_run(deploy_plane, overlay)
    assert result.returncode == 0, result.stderr + result.stdout
    assert result.stdout.count("serverside-applied (server dry run)") == len(objects), result.stdout


def test_the_readme_namespaced_overlay_renders_and_passes_a_server_side_dry_run(
    deploy_plane: ControlPlane, tmp_path: Path
) -> None:
    """docs/install.md's "Job namespaces" overlay, verbatim, over a copy of deploy/ with the
    generator's RoleBindings: the operator is restricted to the listed namespaces, gets the
    namespaces grant, a Secret-read RoleBinding in each, and the API server accepts it all."""
    readme = (REPO / "docs" / "install.md").read_text()
    snippet = readme.split("# my-overlay/kustomization.yaml\n", 1)[1].split("```", 1)[0]
    shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns("examples", "image"))
    overlay = tmp_path / "my-overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(snippet)
    namespaces = ("ml-team", "vision")  # the README's names
    (overlay / "job-namespaces.yaml").write_text(job_namespace_bindings(*namespaces))
    for ns in namespaces:
        if deploy_plane.kubectl("get", "namespace", ns, check=False).returncode != 0:
            deploy_plane.create_namespace(ns)

    objects = rendered(deploy_plane, overlay)
    (config,) = [
        d for d in objects if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "taobrev-operator-config"
    ]
    assert config["data"]["TAOBREV_NAMESPACES"] == ",".join(namespaces)
    bindings = {
        (d["metadata"].get("namespace"), d["roleRef"]["name"]) for d in objects if d["kind"] == "RoleBinding"
    }
    assert bindings == {
        ("ml-team", "taobrev-operator-job-secrets"),
        ("vision", "taobrev-operator-job-secrets"),
        (OPERATOR_NAMESPACE, "taobrev-operator-brev-credentials"),
        (OPERATOR_NAMESPACE, "taobrev-operator-leader-election"),
        (OPERATOR_NAMESPACE, "taobrev-operator-retained-instances"),
    }
    assert any(
        d["kind"] == "ClusterRole" and d["metadata"]["name"] == "taobrev-operator-namespaces" for d in objects
    )
    result = server_dry_run(deploy_plane, overlay)
    assert result.returncode == 0, result.stderr + result.stdout
    assert result.stdout.count("serverside-applied (server dry run)") == len(objects), result.stdout


def test_a_misspelled_field_fails_the_server_side_dry_run(deploy_plane: ControlPlane, tmp_path: Path) -> None:
    """The dry run is a real check: a copy of deploy/ whose ServiceMonitor says `honorLables` is
    rejected by the API server, naming the field."""
    broken = tmp_path / "deploy"
    shutil.copytree(DEPLOY, broken, ignore=shutil.ignore_patterns("image", "examples"))
    monitor = broken / "monitoring" / "servicemonitor.yaml"
    text = monitor.read_text()
    assert text.count("honorLabels: true") == 1
    monitor.write_text(text.replace("honorLabels: true", "honorLables: true"))

    result = server_dry_run(deploy_plane, broken)
    assert result.returncode != 0, result.stdout
    assert "honorLables" in result.stderr, result.stderr


def test_operator_pod_is_admitted_under_the_restricted_pod_security_standard(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The Deployment's Pod template, created as a Pod in a namespace enforcing `restricted` (as
    deploy/'s namespace does), passes PodSecurity admission; weakening it is rejected."""
    control_plane.kubectl(
        "label", "namespace", namespace,
        "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest",
    )  # fmt: skip
    (deployment,) = [d for d in rendered(control_plane, DEPLOY) if d["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "taobrev-operator-probe", "namespace": namespace, **template["metadata"]},
        "spec": template["spec"],
    }
    ok = control_plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    assert ok.returncode == 0, ok.stderr
    assert "Warning" not in ok.stderr, ok.stderr

    pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    weak = control_plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    assert weak.returncode != 0
    assert "violates PodSecurity" in weak.stderr, weak.stderr


def test_default_install_reads_secrets_only_in_enabled_job_namespaces(
    control_plane: ControlPlane, namespace: str
) -> None:
    """With deploy/base applied (the default install), the API server answers `no` to
    `kubectl auth can-i get secrets` as the operator in kube-system and in a fresh namespace;
    after deploy/tools/job_namespaces.py's RoleBinding for that namespace, `yes` there only
    (and still never list/watch). The operator's own Brev Secret stays readable by name."""
    cp = control_plane
    ensure_operator_namespace(cp)
    cp.kubectl("apply", "-k", str(DEPLOY / "base"))
    other = f"{namespace[:56]}-other"
    cp.create_namespace(other)

    assert not operator_can(cp, "get", "secrets", "kube-system")
    assert not operator_can(cp, "get", "secrets", namespace)
    assert not operator_can(cp, "get", "secrets", OPERATOR_NAMESPACE)
    assert operator_can(cp, "get", "secrets/taobrev-brev-credentials", OPERATOR_NAMESPACE)

    cp.kubectl("apply", "-f", "-", input=job_namespace_bindings(namespace))

    assert operator_can(cp, "get", "secrets", namespace)
    assert not operator_can(cp, "list", "secrets", namespace)
    assert not operator_can(cp, "watch", "secrets", namespace)
    assert not operator_can(cp, "get", "secrets", other)
    assert not operator_can(cp, "get", "secrets", "kube-system")


def process_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def kubectl_as(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """kubectl with only the given kubeconfig (the token lives in that 0600 file, never in argv)."""
    return subprocess.run(
        [kubectl_path(), f"--kubeconfig={kubeconfig}", f"--cache-dir={kubeconfig.parent / 'cache'}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_operator_authenticates_as_the_deploy_service_account_and_completes_a_job(
    enabled_job_namespace: str, stack: Stack, tmp_path: Path
) -> None:
    """The operator process has no kubeconfig and reads a TokenRequest token from a non-default
    path; that token is deploy/'s ServiceAccount, bound to exactly deploy/'s RBAC plus the job
    namespace's RoleBinding (no more: it cannot list Secrets, read kube-system's or create jobs),
    and with it the operator runs a job to Succeeded."""
    assert stack.operator.proc is not None
    env = process_env(stack.operator.proc.pid)
    assert "KUBECONFIG" not in env
    token_path = Path(env["TAOBREV_KUBE_TOKEN_PATH"])
    assert str(token_path) != DEFAULT_TOKEN_PATH
    assert token_path.is_file()

    kubeconfig = stack.cp.kubeconfig_for_token(token_path.read_text().strip(), tmp_path / "sa" / "kubeconfig")
    whoami = kubectl_as(kubeconfig, "auth", "whoami", "-o", "json")
    assert whoami.returncode == 0, whoami.stderr
    user = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{OPERATOR_NAMESPACE}:{SERVICE_ACCOUNT}"

    # The live RBAC is deploy/base's, object for object.
    for want in (d for d in rendered(stack.cp, DEPLOY / "base") if d["kind"] in RBAC_KINDS):
        where = ["-n", want["metadata"]["namespace"]] if "namespace" in want["metadata"] else []
        live = json.loads(
            stack.kubectl("get", want["kind"], want["metadata"]["name"], *where, "-o", "json").stdout
        )
        for key in ("rules", "roleRef", "subjects"):
            assert live.get(key) == want.get(key), (want["kind"], want["metadata"]["name"], key)

    def can_i(*args: str) -> bool:
        answer = kubectl_as(kubeconfig, "auth", "can-i", *args)
        assert answer.stdout.strip() in ("yes", "no"), answer.stderr
        return answer.stdout.strip() == "yes"

    ns = stack.namespace
    assert can_i("patch", "taobrevjobs.taobrev.io", "--subresource=status", "-n", ns)
    assert can_i("watch", "taobrevjobs.taobrev.io", "--all-namespaces")
    assert not can_i("create", "taobrevjobs.taobrev.io", "-n", ns)
    assert can_i("get", "secrets", "-n", ns)
    assert not can_i("list", "secrets", "-n", ns)
    assert not can_i("get", "secrets", "-n", "kube-system")
    assert not can_i("create", "pods", "-n", ns)

    stack.apply(stack.job_manifest("as-service-account"))
    status = stack.wait_finished("as-service-account")
    assert status["outcome"] == "Succeeded", status
    assert status["phase"] == "Deleted"


def test_operator_without_its_cluster_role_binding_cannot_act_on_jobs(
    control_plane: ControlPlane,
    crds_installed: list[Path],
    brev_sim: BrevSim,
    s3_server: S3Server,
    enabled_job_namespace: str,
    tmp_path: Path,
) -> None:
    """deploy/'s RBAC minus the `taobrev-operator` ClusterRoleBinding: the operator (all
    namespaces, as the Deployment runs it) is refused the TaoBrevJob list, so the job gets no
    status and no finalizer, and no instance is created.

    It runs as its own ServiceAccount carrying copies of deploy/'s other bindings, so the shared
    `taobrev-operator` binding other tests rely on is never touched.
    """
    cp = control_plane
    namespace = enabled_job_namespace
    install_operator_identity(cp, brev_sim)  # the Brev credentials Secret + Role it reads
    account = f"taobrev-operator-unbound-{secrets.token_hex(3)}"
    bindings = []
    job_bindings = [d for d in yaml.safe_load_all(job_namespace_bindings(namespace)) if d]
    for doc in rendered(cp, DEPLOY / "base") + job_bindings:
        if doc["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if doc["kind"] == "ClusterRoleBinding" and doc["roleRef"]["name"] == "taobrev-operator":
            continue  # the binding under test
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-{account}"
        doc["subjects"] = [{"kind": "ServiceAccount", "name": account, "namespace": OPERATOR_NAMESPACE}]
        bindings.append(doc)
    assert {b["roleRef"]["name"] for b in bindings} == {
        "taobrev-operator-job-secrets",  # the job namespace's RoleBinding
        "taobrev-operator-brev-credentials",
        "taobrev-operator-leader-election",
        "taobrev-operator-retained-instances",
        "taobrev-operator-quotas",  # get namespaces (quota annotations)
        "system:auth-delegator",  # the log API: TokenReview, SubjectAccessReview
        "taobrev-operator-auth-reader",  # the log API: the front proxy's CA
    }

    token_file = tmp_path / "token" / "token"
    token_file.parent.mkdir()
    token_file.write_text(cp.service_account_token(OPERATOR_NAMESPACE, account, duration="1h"))
    token_file.chmod(0o600)
    bindings_json = json.dumps({"apiVersion": "v1", "kind": "List", "items": bindings})
    # The cluster id is given: deriving it needs the unbound ClusterRole (kube-system's uid), and
    # without it the operator would stop at start-up instead of reaching the list under test.
    operator = OperatorProcess(
        cp,
        brev_sim,
        tmp_path / "operator",
        extra_env={"TAOBREV_KUBE_TOKEN_PATH": str(token_file), "TAOBREV_CLUSTER_ID": "unbound-test"},
    )
    stack = Stack(cp, brev_sim, s3_server, operator, namespace, f"results-{namespace}"[:63].rstrip("-"))
    try:
        cp.kubectl("apply", "-f", "-", input=bindings_json)
        stack.create_job_secrets()
        stack.apply(stack.job_manifest("unbound"))
        operator.start()

        # The observable signal: the API server refused the operator's TaoBrevJob list.
        refused = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{account}"
        deadline = time.monotonic() + 60
        while not any(
            refused in line and "cannot list resource" in line and "taobrevjobs" in line
            for line in operator.log_text().splitlines()
        ):
            assert operator.proc is not None, operator.log_tail()
            assert operator.proc.poll() is None, operator.log_tail()
            if time.monotonic() > deadline:
                pytest.fail(f"the operator was never refused the TaoBrevJob list:\n{operator.log_tail()}")
            time.sleep(0.2)

        obj = stack.get("unbound")
        assert obj is not None
        assert not obj.get("status"), obj.get("status")
        assert not obj["metadata"].get("finalizers"), obj["metadata"]
        assert not [c for c in brev_sim.calls() if c.argv[:1] == ["create"]]
    finally:
        operator.stop()
        cp.kubectl("delete", "-f", "-", "--ignore-not-found", input=bindings_json, check=False)
        cp.kubectl(
            "delete", "serviceaccount", account, "-n", OPERATOR_NAMESPACE, "--ignore-not-found", check=False
        )


def promtool() -> str:
    # A missing promtool is a broken environment, not a reason to skip the alert tests.
    try:
        return find_binary("promtool")
    except PrometheusError as e:
        pytest.fail(str(e))


def promtool_test(tmp_path: Path, groups: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` on tests/data/alerts' cases, against `groups` as the rule file."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "taobrev-operator.rules.yaml").write_text(yaml.safe_dump(groups, sort_keys=False))
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    return subprocess.run(
        [promtool(), "test", "rules", ALERT_TESTS.name],
        cwd=tmp_path,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_prometheus_rule_alerts_pass_promtool_unit_tests(tmp_path: Path) -> None:
    """deploy/monitoring/prometheusrule.yaml's alerts pass promtool's lint and the unit tests in
    tests/data/alerts/; an alert with a changed `for:` fails them (the check can fail)."""
    groups = rule_groups(DEPLOY / "monitoring" / "prometheusrule.yaml")
    rule_file = tmp_path / "check" / "taobrev-operator.rules.yaml"
    rule_file.parent.mkdir()
    rule_file.write_text(yaml.safe_dump(groups, sort_keys=False))
    check = subprocess.run(
        [promtool(), "check", "rules", str(rule_file)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr

    passed = promtool_test(tmp_path / "as-shipped", groups)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "SUCCESS" in passed.stdout

    stuck = next(
        r for g in groups["groups"] for r in g["rules"] if r.get("alert") == "TaoBrevJobStuckInPhase"
    )
    stuck["for"] = "30m"
    failed = promtool_test(tmp_path / "mutated", groups)
    assert failed.returncode != 0, failed.stdout
    assert "TaoBrevJobStuckInPhase" in failed.stdout + failed.stderr
