"""`helm install` / `upgrade` / `uninstall` of deploy/helm/taobrev-operator on the real control plane.

Each helm major pinned in versions.yaml gets a control plane of its own: the chart owns cluster
singletons (the log API's APIService, the ClusterRoles, the CRDs) that other e2e tests create
with kubectl on the shared one, and an uninstall would delete them under those tests. There is
no operator image here, so the Deployment never becomes ready; the test checks the objects:

- install creates the CRDs from the chart's crds/ and every object `helm get manifest` lists;
- the documented CRD upgrade step (`kubectl apply --server-side --force-conflicts -f
  <chart>/crds/`) changes the CRDs Helm created (without --force-conflicts: a conflict with
  the "helm" field manager, with Helm 3 and 4 alike);
- upgrade changes what the new values say (settings, replicas, a new job namespace's
  RoleBinding, the Pods' config checksum) and removes what they turn off (the NetworkPolicy);
- uninstall removes every release object and keeps the CRDs and the TaoBrevJobs in them;
- a kustomize install (`kubectl apply --server-side -k deploy/base`) is adopted by
  `helm install --take-ownership` with the same names and selectors (docs/helm.md "From kustomize").
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.devenv.controlplane import ControlPlane
from tests.fixtures.helm import CHART, DEPLOY, NAMESPACE, RELEASE, docs, helm_binary, helm_env

MAJORS = ("v3", "v4")
EXAMPLE_JOB = Path(__file__).resolve().parents[2] / "crds" / "examples" / "minimal.yaml"


class Helm:
    """One helm binary bound to one control plane's admin kubeconfig."""

    def __init__(self, major: str, binary: Path, cp: ControlPlane, workdir: Path) -> None:
        self.major, self.binary, self.cp, self.workdir = major, binary, cp, workdir

    def __call__(self, *args: str, values: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binary), f"--kubeconfig={self.cp.kubeconfig}", "--kube-context=admin", *args]
        if values is not None:
            path = self.workdir / "values.json"
            path.write_text(json.dumps(values))
            argv += ["--values", str(path)]
        done = subprocess.run(argv, env=helm_env(), capture_output=True, text=True, check=False, timeout=300)
        assert done.returncode == 0, f"{' '.join(argv)}\n{done.stdout}{done.stderr}"
        return done

    def manifest(self) -> list[dict[str, Any]]:
        return docs(self("get", "manifest", RELEASE, "--namespace", NAMESPACE).stdout)


@pytest.fixture(scope="module", params=MAJORS)
def helm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Helm]:
    binary = helm_binary(request.param)
    cp = ControlPlane.start(tmp_path_factory.mktemp(f"helm-{request.param}-controlplane"))
    try:
        yield Helm(request.param, binary, cp, tmp_path_factory.mktemp(f"helm-{request.param}"))
    finally:
        cp.stop()


def get(cp: ControlPlane, doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """`kubectl get` of the object `doc` names (by its API group, kind, namespace and name)."""
    group = doc["apiVersion"].rpartition("/")[0]
    resource = doc["kind"].lower() + (f".{group}" if group else "")
    where = ["-n", doc["metadata"]["namespace"]] if doc["metadata"].get("namespace") else []
    return cp.kubectl("get", resource, doc["metadata"]["name"], *where, "-o", "json", check=False)


def live(cp: ControlPlane, doc: dict[str, Any]) -> dict[str, Any]:
    found = get(cp, doc)
    assert found.returncode == 0, found.stderr
    obj: dict[str, Any] = json.loads(found.stdout)
    return obj


def find(objects: list[dict[str, Any]], kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    (doc,) = [
        d
        for d in objects
        if d["kind"] == kind
        and d["metadata"]["name"] == name
        and (namespace is None or d["metadata"].get("namespace") == namespace)
    ]
    return doc


def ensure_namespaces(cp: ControlPlane, *names: str) -> None:
    for ns in names:
        if cp.kubectl("get", "namespace", ns, check=False).returncode != 0:
            cp.create_namespace(ns)


def test_install_upgrade_uninstall(helm: Helm) -> None:
    cp = helm.cp
    ensure_namespaces(cp, NAMESPACE, "ml-team", "vision")
    first = {"jobNamespaces": ["ml-team"], "settings": {"TAOBREV_LOG_LEVEL": "INFO"}}

    # install: the CRDs from the chart's crds/, then every templated object.
    helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, values=first)
    crds = ("taobrevjobs.taobrev.io", "taobrevnotifiers.taobrev.io")
    for crd in crds:
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}")
    installed = helm.manifest()
    assert len(installed) >= 25
    for doc in installed:
        assert live(cp, doc)["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    deployment = live(cp, find(installed, "Deployment", "taobrev-operator"))
    assert deployment["spec"]["replicas"] == 2
    checksum = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    assert live(cp, find(installed, "RoleBinding", "taobrev-operator-job-secrets", "ml-team"))
    cp.kubectl("apply", "-n", "ml-team", "-f", str(EXAMPLE_JOB))

    # The CRD upgrade path of docs/helm.md: server-side apply over the CRDs Helm created, taking
    # the fields Helm wrote (--force-conflicts), here a changed schema description.
    changed = tmp_crds(helm.workdir)
    refused = cp.kubectl("apply", "--server-side", "-f", str(changed), check=False)
    assert refused.returncode != 0 and 'conflict with "helm"' in refused.stderr, refused.stderr
    applied = cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(changed))
    assert applied.stdout.count("serverside-applied") == len(crds), applied.stdout
    crd = json.loads(cp.kubectl("get", "crd", crds[0], "-o", "json").stdout)
    assert crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"].startswith(NEW_DESCRIPTION)

    # upgrade: new settings, replicas and job namespace; the NetworkPolicy turned off.
    second = {
        "jobNamespaces": ["ml-team", "vision"],
        "replicaCount": 3,
        "settings": {"TAOBREV_LOG_LEVEL": "DEBUG"},
        "networkPolicy": {"enabled": False},
    }
    helm("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, values=second)
    upgraded = helm.manifest()
    config = live(cp, find(upgraded, "ConfigMap", "taobrev-operator-config"))
    assert config["data"]["TAOBREV_LOG_LEVEL"] == "DEBUG"
    deployment = live(cp, find(upgraded, "Deployment", "taobrev-operator"))
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != checksum
    assert live(cp, find(upgraded, "RoleBinding", "taobrev-operator-job-secrets", "vision"))
    policy = find(installed, "NetworkPolicy", "taobrev-operator")
    assert get(cp, policy).returncode != 0, "the upgrade left the NetworkPolicy it turned off"
    history = helm("history", RELEASE, "--namespace", NAMESPACE, "-o", "json").stdout
    assert [r["revision"] for r in json.loads(history)] == [1, 2]

    # uninstall: every release object gone; the CRDs and the jobs in them stay.
    helm("uninstall", RELEASE, "--namespace", NAMESPACE)
    for doc in upgraded:
        assert get(cp, doc).returncode != 0, f"{doc['kind']}/{doc['metadata']['name']} survived uninstall"
    for crd_name in crds:
        assert cp.kubectl("get", "crd", crd_name, check=False).returncode == 0
    job = yaml.safe_load(EXAMPLE_JOB.read_text())
    assert (
        cp.kubectl("get", "taobrevjob", job["metadata"]["name"], "-n", "ml-team", check=False).returncode == 0
    )


def test_a_kustomize_install_is_adopted_by_the_chart(helm: Helm) -> None:
    """Same names, same selectors: `helm install --take-ownership` over deploy/base turns every
    object into the release's, and a later uninstall removes them. Helm 4 applies server-side:
    kubectl's apply owns `app.kubernetes.io/managed-by` (kustomize), so it needs
    --force-conflicts (without it: one conflict per object on that label)."""
    cp = helm.cp
    ensure_namespaces(cp, NAMESPACE)
    cp.kubectl("apply", "--server-side", "-f", str(CHART / "crds"))
    cp.kubectl("apply", "--server-side", "-k", str(DEPLOY / "base"))
    metadata = {"name": "taobrev-operator", "namespace": NAMESPACE}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata}
    assert live(cp, deployment)["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kustomize"

    extra = ["--force-conflicts"] if helm.major == "v4" else []
    helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--take-ownership", *extra, values={})
    adopted = helm.manifest()
    for doc in adopted:
        obj = live(cp, doc)
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm", doc["metadata"]["name"]
        assert obj["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE

    helm("uninstall", RELEASE, "--namespace", NAMESPACE)
    for doc in adopted:
        assert get(cp, doc).returncode != 0, f"{doc['kind']}/{doc['metadata']['name']} survived uninstall"


NEW_DESCRIPTION = "Changed by tests/e2e/test_helm.py."


def tmp_crds(workdir: Path) -> Path:
    """The chart's CRDs with one change a newer release could make: the schema's description."""
    out = workdir / "crds"
    out.mkdir(exist_ok=True)
    for source in sorted((CHART / "crds").glob("*.yaml")):
        crd = yaml.safe_load(source.read_text())
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        schema["description"] = f"{NEW_DESCRIPTION} {schema.get('description', '')}"
        (out / source.name).write_text(yaml.safe_dump(crd))
    return out
