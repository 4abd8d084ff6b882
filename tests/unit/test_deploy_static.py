"""Static checks of the container image definition and the deploy/ manifests (nothing is built or
applied here: the e2e tests apply deploy/ to a real control plane)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller.observability.logs import redact_text
from controller.observability.metrics import Recorder
from controller.observability.node_costs import NodeCost

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BASE = DEPLOY / "base"
DOCKERFILE = DEPLOY / "image" / "Dockerfile"
DEFAULT_SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def one(path: Path, kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in load_all(path) if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{path.name}: expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def deployment() -> dict[str, Any]:
    return one(BASE / "deployment.yaml", "Deployment")


@pytest.fixture(scope="module")
def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container["env"]}


# -- Dockerfile ------------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            word, _, rest = stripped.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_base_images_are_pinned_by_digest_to_versions_yaml() -> None:
    """Every FROM is versions.yaml's python_base tag (an explicit python:3.11.X tag) plus
    `@${PYTHON_DIGEST}`, a build arg without default declared before the first FROM: a build without
    the resolved digest (empty, or REPLACE_AT_RELEASE) is not a valid image reference."""
    instructions = dockerfile_instructions()
    pin = yaml.safe_load((REPO / "versions.yaml").read_text())["images"]["python_base"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+", pin["image"]), pin
    first_from = next(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    assert ("ARG", "PYTHON_DIGEST") in instructions[:first_from]
    froms = [args.split()[0] for word, args in instructions if word == "FROM"]
    assert froms
    for image in froms:
        assert image == f"{pin['image']}@${{PYTHON_DIGEST}}", image
    assert '--build-arg PYTHON_DIGEST="$(pin images python_base digest)"' in DOCKERFILE.read_text()


def test_image_build_refuses_an_unresolved_aws_cli_digest() -> None:
    """The final stage checks the copied versions.yaml: the aws-cli image the operator runs on
    instances is pinned by digest in any image that builds."""
    runs = [rest for word, rest in dockerfile_instructions() if word == "RUN"]
    (check,) = [r for r in runs if "aws_cli_pin" in r]
    assert "TAOBREV_VERSIONS_FILE=/opt/taobrev/versions.yaml" in check
    assert "pin.resolved" in check
    assert "make resolve-digests" in check


def test_brev_cli_version_and_checksum_come_from_build_args_and_are_verified() -> None:
    """The brev archive is fetched for ARG BREV_VERSION and checked with `sha256sum -c` against
    ARG BREV_SHA256; no brev version is hard-coded (the pin lives in versions.yaml)."""
    instructions = dockerfile_instructions()
    args = {rest.split("=")[0] for word, rest in instructions if word == "ARG"}
    assert {"BREV_VERSION", "BREV_SHA256"} <= args
    assert not any(word == "ARG" and "=" in rest for word, rest in instructions), "no defaults for pins"
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    assert 'echo "${BREV_SHA256}  /tmp/${archive}" | sha256sum -c -' in runs
    assert "releases/download/${BREV_VERSION}/" in runs
    assert 'grep -qx "Current Version: ${BREV_VERSION}"' in runs
    assert "REPLACE_AT_RELEASE" in runs, "refuses the placeholder checksum"
    body = "\n".join(rest for _, rest in instructions)
    assert not re.search(r"\bv?\d+\.\d+\.\d{3}\b", body), "a hard-coded brev version"
    # The documented build command passes exactly the versions.yaml keys the image needs.
    header = DOCKERFILE.read_text()
    assert '--build-arg BREV_VERSION="$(pin brev cli_version)"' in header
    assert '--build-arg BREV_SHA256="$(pin brev cli_sha256)"' in header
    pins = yaml.safe_load((REPO / "versions.yaml").read_text())["brev"]
    assert set(pins) >= {"cli_version", "cli_sha256"}


def test_image_installs_the_package_with_constraints_and_runs_non_root() -> None:
    """pip installs `.` under the pinned constraints, ssh is present, the last USER is 65532,
    HOME is /home/operator and the entrypoint is `python -m controller` under tini as PID 1 (the
    version the Makefile installs for the PID 1 test)."""
    instructions = dockerfile_instructions()
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    assert "pip install --no-cache-dir --no-compile -c requirements/constraints.txt ." in runs
    assert "openssh-client" in runs
    tini = re.search(r"^TINI_VERSION := (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert tini is not None
    assert f"tini={tini.group(1)}" in runs.split()
    users = [rest for word, rest in instructions if word == "USER"]
    assert users[-1] == "65532:65532"
    envs = " ".join(rest for word, rest in instructions if word == "ENV")
    assert "HOME=/home/operator" in envs
    assert "TAOBREV_VERSIONS_FILE=/opt/taobrev/versions.yaml" in envs
    assert any(
        word == "COPY" and rest == "versions.yaml /opt/taobrev/versions.yaml" for word, rest in instructions
    )
    assert instructions[-1] == ("ENTRYPOINT", '["/usr/bin/tini", "--", "python", "-m", "controller"]')


def test_image_definition_holds_no_secret() -> None:
    """No credential-looking text, and no ARG/ENV named like a credential (build args and env
    end up in the image history)."""
    for path in (DOCKERFILE, DOCKERFILE.with_name("Dockerfile.dockerignore")):
        assert redact_text(path.read_text()) == path.read_text(), path.name
    for word, rest in dockerfile_instructions():
        if word in ("ARG", "ENV"):
            names = re.findall(r"([A-Z_][A-Z0-9_]*)=", rest) or [rest.split("=")[0]]
            for name in names:
                assert not re.search(r"TOKEN|PASSWORD|SECRET|API_KEY|NGC", name), name


def test_build_context_is_an_allow_list() -> None:
    """Dockerfile.dockerignore starts by excluding everything (.venv, .git, .devenv stay out)."""
    lines = [
        ln.strip()
        for ln in DOCKERFILE.with_name("Dockerfile.dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {ln[1:] for ln in lines if ln.startswith("!")}
    copied = {"pyproject.toml", "README.md", "requirements/constraints.txt", "versions.yaml"}
    assert copied <= allowed
    assert "controller/**" in allowed


# -- RBAC ------------------------------------------------------------------------------------------


def test_every_rbac_rule_has_a_comment_saying_why() -> None:
    """Each `- apiGroups:` rule line is directly preceded by a comment line at its indentation."""
    lines = (BASE / "rbac.yaml").read_text().splitlines()
    rules = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("- apiGroups:")]
    assert len(rules) == sum(len(d.get("rules", [])) for d in load_all(BASE / "rbac.yaml"))
    for i in rules:
        indent = len(lines[i]) - len(lines[i].lstrip())
        prev = lines[i - 1]
        assert prev.lstrip().startswith("#"), f"rbac.yaml line {i + 1}: rule without a comment above it"
        assert len(prev) - len(prev.lstrip()) == indent, (
            f"rbac.yaml line {i + 1}: rule without a comment above it"
        )


def rules_of(kind: str, name: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = one(BASE / "rbac.yaml", kind, name)["rules"]
    return rules


def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_operator_cluster_role_is_exactly_what_kopf_and_the_reconciler_use() -> None:
    """The minimal set, verified against kopf 1.45.2 run --standalone over all namespaces: no
    wildcards, no peering resources, Events create only, CRDs list/watch only, and no namespaces
    (only the namespace-restricted mode needs them: deploy/components/namespaced-mode)."""
    assert grants(rules_of("ClusterRole", "taobrev-operator")) == {
        ("taobrev.io", "taobrevjobs", "get"),
        ("taobrev.io", "taobrevjobs", "list"),
        ("taobrev.io", "taobrevjobs", "watch"),
        ("taobrev.io", "taobrevjobs", "patch"),
        ("taobrev.io", "taobrevjobs", "delete"),  # spec.ttlSecondsAfterFinished only (fleet/ttl.py)
        ("taobrev.io", "taobrevjobs/status", "get"),
        ("taobrev.io", "taobrevjobs/status", "patch"),
        ("taobrev.io", "taobrevnotifiers", "list"),  # notifications: a job's notifiers
        ("taobrev.io", "taobrevnotifiers/status", "patch"),  # ... and their delivery status
        ("", "events", "create"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
        ("", "namespaces", "get"),  # kube-system only: the cluster id (below)
        ("kueue.x-k8s.io", "workloads", "get"),  # TAOBREV_KUEUE: the job's Workload (docs/kueue.md)
        ("kueue.x-k8s.io", "workloads", "create"),
        ("kueue.x-k8s.io", "workloads", "list"),  # kopf's watch: an eviction wakes the job
        ("kueue.x-k8s.io", "workloads", "watch"),
        ("kueue.x-k8s.io", "workloads/status", "patch"),  # Finished, or the quota given back
        ("kueue.x-k8s.io", "workloadpriorityclasses", "get"),
    }
    (ns_rule,) = [r for r in rules_of("ClusterRole", "taobrev-operator") if r["resources"] == ["namespaces"]]
    assert ns_rule["resourceNames"] == ["kube-system"]


def test_secrets_are_readable_by_name_only() -> None:
    """Secrets: `get` only (never list/watch); the operator's own Secret via resourceNames."""
    assert grants(rules_of("ClusterRole", "taobrev-operator-job-secrets")) == {("", "secrets", "get")}
    (own,) = rules_of("Role", "taobrev-operator-brev-credentials")
    assert own["resourceNames"] == ["taobrev-brev-credentials"]
    assert own["verbs"] == ["get"]
    for doc in load_all(BASE / "rbac.yaml"):
        for rule in doc.get("rules", []):
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]


OPERATOR_SA = {"kind": "ServiceAccount", "name": "taobrev-operator", "namespace": "taobrev-system"}


def bindings_in(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"].endswith("RoleBinding")}


def test_every_base_role_but_job_secrets_is_bound_to_the_operator_service_account() -> None:
    """Each (Cluster)Role in rbac.yaml is bound to taobrev-system/taobrev-operator, except the
    job-Secrets ClusterRole: the default install binds it in no namespace at all."""
    docs = load_all(BASE / "rbac.yaml")
    roles = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("Role", "ClusterRole")}
    bound = set()
    for d in bindings_in(docs).values():
        assert d["subjects"] == [OPERATOR_SA]
        bound.add((d["roleRef"]["kind"], d["roleRef"]["name"]))
    assert roles - bound == {("ClusterRole", "taobrev-operator-job-secrets")}
    assert bound <= roles


def secret_readers(docs: list[dict[str, Any]]) -> set[str]:
    """Names of the (Cluster)Roles in `docs` that grant anything on secrets."""
    return {
        d["metadata"]["name"]
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
        for rule in d.get("rules", [])
        if "secrets" in rule["resources"]
    }


def test_no_cluster_wide_secret_read_in_the_default_install() -> None:
    """No ClusterRoleBinding in deploy/base binds a role that reads Secrets (checkov CKV2_K8S_5;
    the e2e test asks the API server the same with `kubectl auth can-i`)."""
    docs = [d for f in BASE.glob("*.yaml") if f.name != "kustomization.yaml" for d in load_all(f)]
    readers = secret_readers(docs)
    assert readers == {"taobrev-operator-job-secrets", "taobrev-operator-brev-credentials"}
    for (kind, name), binding in bindings_in(docs).items():
        if kind == "ClusterRoleBinding":
            assert binding["roleRef"]["name"] not in readers, name


COMPONENTS = DEPLOY / "components"


def component_docs(name: str) -> list[dict[str, Any]]:
    k = yaml.safe_load((COMPONENTS / name / "kustomization.yaml").read_text())
    assert k["kind"] == "Component"
    return [d for f in k["resources"] for d in load_all(COMPONENTS / name / f)]


def test_cluster_wide_secret_read_is_an_explicit_opt_in_component() -> None:
    """deploy/components/cluster-wide-secrets holds exactly the ClusterRoleBinding of the base's
    job-Secrets ClusterRole to the operator, carrying the accepted checkov finding on itself."""
    (binding,) = component_docs("cluster-wide-secrets")
    assert binding["kind"] == "ClusterRoleBinding"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "taobrev-operator-job-secrets",
    }
    assert binding["subjects"] == [OPERATOR_SA]
    assert binding["metadata"]["annotations"]["checkov.io/skip1"].startswith("CKV2_K8S_5=")


def test_namespace_list_watch_comes_only_with_the_namespaced_mode_component() -> None:
    """The namespaces grant kopf needs with TAOBREV_NAMESPACES lives in
    deploy/components/namespaced-mode, bound to the operator; the default kustomization does not
    include that component."""
    docs = component_docs("namespaced-mode")
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    assert grants(role["rules"]) == {("", "namespaces", "list"), ("", "namespaces", "watch")}
    (binding,) = bindings_in(docs).values()
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [OPERATOR_SA]
    for path in (DEPLOY / "kustomization.yaml", BASE / "kustomization.yaml"):
        assert "namespaced-mode" not in path.read_text()
        assert "cluster-wide-secrets" not in path.read_text()


def test_settings_configmap_offers_the_secret_allow_list_and_namespaces_switched_off() -> None:
    """TAOBREV_REQUIRE_SECRET_LABEL and TAOBREV_NAMESPACES are shown in the ConfigMap as commented
    options (the defaults: no allow-list, all namespaces)."""
    text = (BASE / "config.yaml").read_text()
    assert '  # TAOBREV_REQUIRE_SECRET_LABEL: "true"\n' in text
    assert "taobrev.io/usable=true" in text
    assert "  # TAOBREV_NAMESPACES: " in text
    data = one(BASE / "config.yaml", "ConfigMap")["data"]
    assert "TAOBREV_REQUIRE_SECRET_LABEL" not in data
    assert "TAOBREV_NAMESPACES" not in data


# -- NetworkPolicy ---------------------------------------------------------------------------------


def test_network_policy_admits_monitoring_to_metrics_and_anyone_to_the_probe_and_log_api_ports_only(
    deployment: dict[str, Any], container: dict[str, Any]
) -> None:
    """Ingress to the operator Pod: the `monitoring` namespace to the metrics port, the health port
    (kubelet probes; node addresses cannot be selected) and the log API port (kube-apiserver's
    address cannot be selected either; the API authenticates every caller) from anywhere, nothing
    else. Egress is not restricted (API server, Brev, instances, S3 have no stable CIDR)."""
    policy = one(BASE / "networkpolicy.yaml", "NetworkPolicy")
    assert "networkpolicy.yaml" in yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"] == pod_labels
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    metrics, health, log_api = policy["spec"]["ingress"]
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    assert metrics["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert "from" not in health
    assert health["ports"] == [{"port": "health", "protocol": "TCP"}]
    assert "from" not in log_api
    assert log_api["ports"] == [{"port": "log-api", "protocol": "TCP"}]
    names = {p["name"] for p in container["ports"]}
    assert names == {"metrics", "health", "log-api"}
    probe_ports = {
        container[p]["httpGet"]["port"] for p in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert probe_ports == {"health"}


# -- ServiceAccount and Deployment -----------------------------------------------------------------


def test_service_account_token_is_not_automounted() -> None:
    """brev would take the default-path SA token as its own Brev token: automount is off twice."""
    assert one(BASE / "serviceaccount.yaml", "ServiceAccount")["automountServiceAccountToken"] is False


def test_deployment_shape(deployment: dict[str, Any]) -> None:
    """2 replicas (leader + standby, the Lease keeps them from overlapping), rolling update that
    never drops below 2, automount off, SA set."""
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = spec["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "taobrev-operator"


def test_pod_and_container_security_context(deployment: dict[str, Any], container: dict[str, Any]) -> None:
    """Non-root uid 65532, seccomp RuntimeDefault, read-only root fs, no escalation, no caps."""
    pod_sc = deployment["spec"]["template"]["spec"]["securityContext"]
    assert pod_sc["runAsNonRoot"] is True
    assert pod_sc["runAsUser"] == 65532
    assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}


def test_kubernetes_credentials_are_projected_at_a_non_default_path(
    deployment: dict[str, Any], container: dict[str, Any]
) -> None:
    """Token + CA + namespace are projected away from the default SA path, and the env the
    operator's login handler reads points into that mount."""
    pod = deployment["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert not any(p.startswith("/var/run/secrets/kubernetes.io") for p in mounts.values())
    volumes = {v["name"]: v for v in pod["volumes"]}
    name = next(n for n, v in volumes.items() if "projected" in v)
    mount = mounts[name]
    assert mount != DEFAULT_SA_DIR
    sources = volumes[name]["projected"]["sources"]
    token = next(s["serviceAccountToken"] for s in sources if "serviceAccountToken" in s)
    ca = next(s["configMap"] for s in sources if "configMap" in s)
    assert ca["name"] == "kube-root-ca.crt"
    ns = next(s["downwardAPI"] for s in sources if "downwardAPI" in s)
    env = env_of(container)
    assert env["TAOBREV_KUBE_TOKEN_PATH"] == f"{mount}/{token['path']}"
    assert env["TAOBREV_KUBE_CA_PATH"] == f"{mount}/{ca['items'][0]['path']}"
    assert env["TAOBREV_KUBE_NAMESPACE_PATH"] == f"{mount}/{ns['items'][0]['path']}"
    assert env["TAOBREV_KUBE_SERVER"].startswith("https://")
    assert "TAOBREV_OPERATOR_NAMESPACE" in env


def test_writable_home_and_tmp_are_empty_dirs(deployment: dict[str, Any], container: dict[str, Any]) -> None:
    """With a read-only root fs, HOME (~/.brev, ~/.ssh) and /tmp are emptyDirs."""
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    by_path = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    home = env_of(container)["HOME"]
    assert home == "/home/operator"
    assert "emptyDir" in by_path[home]
    assert "emptyDir" in by_path["/tmp"]


def test_probes_use_kopfs_liveness_endpoint(container: dict[str, Any]) -> None:
    """Startup, liveness and readiness probe the /healthz endpoint kopf serves at
    TAOBREV_LIVENESS_ENDPOINT (read by controller/__main__.py), on the container's `health` port."""
    cm = one(BASE / "config.yaml", "ConfigMap")
    match = re.fullmatch(r"http://0\.0\.0\.0:(\d+)(/\S+)", cm["data"]["TAOBREV_LIVENESS_ENDPOINT"])
    assert match
    port, path = int(match[1]), match[2]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        http = container[probe]["httpGet"]
        assert http["path"] == path
        assert ports[http["port"]] == port
    # All namespaces: no TAOBREV_NAMESPACES restriction anywhere.
    assert "TAOBREV_NAMESPACES" not in cm["data"]
    assert "TAOBREV_NAMESPACES" not in env_of(container)


def test_resources_have_requests_and_limits(container: dict[str, Any]) -> None:
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}


def test_operator_image_is_versions_yaml_pin_with_its_digest(container: dict[str, Any]) -> None:
    """The kustomize image is versions.yaml's images.operator: the package version as tag (never
    `latest`) and the same digest (REPLACE_AT_RELEASE until `make resolve-digests`, which the
    kubelet refuses as InvalidImageName); IfNotPresent, as befits a digest."""
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert image["newTag"] == version
    pin = yaml.safe_load((REPO / "versions.yaml").read_text())["images"]["operator"]
    assert pin["image"] == f"{image['newName']}:{image['newTag']}"
    assert image["digest"] == pin["digest"]
    assert container["imagePullPolicy"] == "IfNotPresent"


def test_unresolved_digests_are_the_marked_placeholder_never_an_invented_one() -> None:
    """Every pinned image in versions.yaml validates (sha256:<64 hex> or REPLACE_AT_RELEASE);
    while unresolved, the operator runs the aws-cli image by tag (development and tests)."""
    from controller.versions import UNRESOLVED_DIGEST, load_versions

    images = load_versions().images
    for pin in (images.aws_cli_pin, images.python_base, images.operator):
        assert pin.digest == UNRESOLVED_DIGEST or re.fullmatch(r"sha256:[0-9a-f]{64}", pin.digest)
    assert images.aws_cli == images.aws_cli_pin.reference


def test_settings_configmap_and_metrics_plumbing(container: dict[str, Any]) -> None:
    """Env comes from the ConfigMap; the metrics port agrees across ConfigMap, container, Service
    and ServiceMonitor; the ServiceMonitor keeps our namespace/instance labels (honorLabels)."""
    cm = one(BASE / "config.yaml", "ConfigMap")
    assert container["envFrom"] == [{"configMapRef": {"name": cm["metadata"]["name"]}}]
    assert cm["data"]["TAOBREV_BREV_CREDENTIALS_SECRET"] == "taobrev-brev-credentials"
    for value in cm["data"].values():
        assert redact_text(value) == value, "no credential in the ConfigMap"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == int(cm["data"]["TAOBREV_METRICS_PORT"])
    service = one(BASE / "service.yaml", "Service")
    (svc_port,) = service["spec"]["ports"]
    assert svc_port["targetPort"] == "metrics"
    monitor = one(DEPLOY / "monitoring" / "servicemonitor.yaml", "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == svc_port["name"]
    assert endpoint["honorLabels"] is True


def test_kustomizations_list_existing_files_and_leave_examples_out() -> None:
    """Every listed resource exists; deploy/examples (fake Secrets) is never applied."""
    for path in (
        DEPLOY / "kustomization.yaml",
        BASE / "kustomization.yaml",
        DEPLOY / "monitoring" / "kustomization.yaml",
    ):
        k = yaml.safe_load(path.read_text())
        for entry in k.get("resources", []) + k.get("components", []):
            assert (path.parent / entry).exists(), f"{path}: {entry}"
            assert "examples" not in entry
        for gen in k.get("configMapGenerator", []):
            for f in gen["files"]:
                assert (path.parent / f.split("=", 1)[-1]).exists()


AWS_EXAMPLE_KEY = ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")


def test_example_secrets_are_clearly_fake() -> None:
    """Every example Secret value (deploy/examples, crds/examples) is either AWS's documented
    example key pair or marked FAKE-EXAMPLE; the S3 examples use exactly AWS's pair."""
    paths = [*(DEPLOY / "examples").glob("*.yaml"), REPO / "crds" / "examples" / "secrets.yaml"]
    s3_pairs = []
    for path in paths:
        for doc in load_all(path):
            assert doc["kind"] == "Secret"
            data = doc["stringData"]
            for value in data.values():
                assert value in AWS_EXAMPLE_KEY or value.startswith("FAKE-EXAMPLE-"), (
                    f"{path.name}: {value!r}"
                )
            if "AWS_ACCESS_KEY_ID" in data:
                s3_pairs.append((data["AWS_ACCESS_KEY_ID"], data["AWS_SECRET_ACCESS_KEY"]))
    assert s3_pairs
    assert set(s3_pairs) == {AWS_EXAMPLE_KEY}


# Key shapes of the credentials this project handles: AWS access key ids, NGC keys, Brev API keys,
# Hugging Face tokens, JWTs (Brev access tokens, ServiceAccount tokens).
CREDENTIAL_SHAPES = re.compile(
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|nvapi-[A-Za-z0-9_-]{20,}|\bbak-[A-Za-z0-9]{20,}|\bhf_[A-Za-z0-9]{20,}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"
)


def test_no_credential_shaped_text_outside_the_examples() -> None:
    """deploy/, crds/ and docs/ hold no credential-shaped string except AWS's documented example
    key in the example Secrets: nothing realistic-looking ships."""
    for path in [*DEPLOY.rglob("*"), *(REPO / "crds").rglob("*"), *(REPO / "docs").rglob("*")]:
        if path.is_file() and path.suffix in (".yaml", ".md", ".py", ".lua", ".json", ""):
            found = set(CREDENTIAL_SHAPES.findall(path.read_text()))
            if "examples" in path.parts:
                found -= {AWS_EXAMPLE_KEY[0]}
            assert not found, (path, found)
    assert CREDENTIAL_SHAPES.findall("AKIA" + "Z" * 16 + " nvapi-" + "x" * 30) != []


# -- alerts and dashboard reference real metrics ---------------------------------------------------


def exposed_metric_names() -> set[str]:
    """Every sample name a fully exercised Recorder exposes (bucket/sum/count/total included)."""
    registry = CollectorRegistry()
    rec = Recorder(registry)
    rec.phase_changed("n", "j", "Pending", "Running", 1.0, timeout_seconds=10)
    rec.job_state("n", "j", phase="Running", timeout_seconds=10, outcome="Failed")
    rec.outcome("Failed", "X")
    rec.brev_call("ls", "ok", 0.1)
    rec.reconcile_error("X")
    rec.reconcile_duration(0.1)
    rec.instance_uptime("n", "j", "i", 1.0)
    rec.exit_to_teardown(1.0)
    rec.job_billing("n", "j", 1.0, 0.01)
    rec.node_costs([NodeCost("i-1", "i", "t", "aws", 1, 1.0)], ["i-1"])
    return {
        s.name for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples
    }


def test_alerts_and_dashboard_only_use_exposed_metrics() -> None:
    """A renamed metric cannot silently break an alert or a panel."""
    names = exposed_metric_names()
    rule = one(DEPLOY / "monitoring" / "prometheusrule.yaml", "PrometheusRule")
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    dashboard = json.loads((DEPLOY / "monitoring" / "dashboards" / "taobrev-operator.json").read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    exprs += [t["expr"] for p in panels for t in p["targets"]]
    # Ours, and OpenCost's node gauges we export (node_costs.py).
    used = {m for e in exprs for m in re.findall(r"\b(?:taobrev|node)_[a-z_]+", e)}
    assert used, "no metric referenced"
    assert used <= names, used - names
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"TaoBrevJobStuckInPhase", "TaoBrevInstanceLeftRunning", "TaoBrevCliErrorRateHigh"} <= alerts


def test_test_crds_cover_the_monitoring_kinds() -> None:
    """tests/data/prometheus-operator-crds.yaml defines the kinds deploy/monitoring applies."""
    crds = load_all(REPO / "tests" / "data" / "prometheus-operator-crds.yaml")
    kinds = {(c["spec"]["group"], c["spec"]["names"]["kind"]) for c in crds}
    used = {
        (d["apiVersion"].split("/")[0], d["kind"])
        for f in (DEPLOY / "monitoring").glob("*.yaml")
        if f.name != "kustomization.yaml"
        for d in load_all(f)
    }
    assert used <= kinds


def test_every_operator_setting_is_documented() -> None:
    """A setting nobody can find is a setting nobody can use: docs/settings.md lists each
    TAOBREV_ one."""
    from controller.settings import PREFIX, Settings

    doc = (Path(__file__).resolve().parents[2] / "docs" / "settings.md").read_text()
    names = [f"{PREFIX}{n.upper()}" for n in Settings.model_fields]
    missing = [n for n in names if f"`{n}`" not in doc]
    assert not missing, missing


def test_bad_setting_names_the_variable_and_the_expectation() -> None:
    from controller.settings import Settings

    with pytest.raises(SystemExit) as exc:
        Settings.from_env({"TAOBREV_POLL_INTERVAL": "-1", "TAOBREV_LOG_LEVEL": "LOUD"})
    text = str(exc.value)
    assert "TAOBREV_POLL_INTERVAL" in text
    assert "TAOBREV_LOG_LEVEL" in text
