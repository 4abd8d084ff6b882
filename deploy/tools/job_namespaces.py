#!/usr/bin/env python3
"""Print the RoleBindings that let taobrev-operator read Secrets in the given job namespaces.

The default install binds Secret read nowhere; each namespace that runs TaoBrevJobs gets one
RoleBinding to the `taobrev-operator-job-secrets` ClusterRole (get, by name). Standard library
only, so it runs anywhere python3 does:

    python3 deploy/tools/job_namespaces.py ml-team vision | kubectl apply -f -
    python3 deploy/tools/job_namespaces.py ml-team vision > my-overlay/job-namespaces.yaml
"""

from __future__ import annotations

import argparse
import re
import sys

CLUSTER_ROLE = "taobrev-operator-job-secrets"
# A namespace name is a DNS-1123 label.
LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

TEMPLATE = """\
# Lets the taobrev-operator read (get, by name) the Secrets TaoBrevJobs in {namespace} reference.
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {role}
  namespace: {namespace}
  annotations:
    # checkov flags any ServiceAccount that may read a namespace's Secrets; here that is the
    # design: get by name, only in a namespace its admin enabled for jobs.
    checkov.io/skip1: CKV2_K8S_5=Secret get in an enabled job namespace (docs/install.md "Job namespaces")
  labels:
    app.kubernetes.io/name: taobrev-operator
    app.kubernetes.io/part-of: taobrev-operator
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {role}
subjects:
  - kind: ServiceAccount
    name: {account}
    namespace: {operator_namespace}
"""


def render(namespaces: list[str], *, operator_namespace: str, service_account: str) -> str:
    """One RoleBinding document per namespace (duplicates dropped, order kept)."""
    for name, value in [("namespace", n) for n in namespaces] + [
        ("--operator-namespace", operator_namespace),
        ("--service-account", service_account),
    ]:
        if not LABEL.fullmatch(value):
            raise ValueError(
                f"{name} {value!r} is not a valid Kubernetes name: use lower-case letters, digits "
                "and '-', starting and ending with a letter or digit, at most 63 characters"
            )
    if operator_namespace in namespaces:
        raise ValueError(
            f"namespace {operator_namespace!r} is the operator's own namespace: do not run jobs "
            "there (its Secrets include the operator's Brev credentials); pick another namespace"
        )
    docs = [
        TEMPLATE.format(
            namespace=n, role=CLUSTER_ROLE, account=service_account, operator_namespace=operator_namespace
        )
        for n in dict.fromkeys(namespaces)
    ]
    return "---\n".join(docs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("namespaces", nargs="+", metavar="NAMESPACE", help="namespaces that run TaoBrevJobs")
    parser.add_argument("--operator-namespace", default="taobrev-system")
    parser.add_argument("--service-account", default="taobrev-operator")
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(
            render(
                args.namespaces,
                operator_namespace=args.operator_namespace,
                service_account=args.service_account,
            )
        )
    except ValueError as e:
        print(f"job_namespaces.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
