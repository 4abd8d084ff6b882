"""Shared fixtures. Each plugin module is owned by one part of the system:

- cluster: the real local control plane (kube-apiserver + etcd + kubectl), a namespace per test;
- s3: moto in server mode on loopback;
- brevsim: the Brev CLI simulator (bin dir to put first on PATH, fault injection, call record);
- operator: the operator as a separate process against all of the above.
"""

pytest_plugins = [
    "tests.fixtures.cluster",
    "tests.fixtures.s3",
    "tests.fixtures.brevsim",
    "tests.fixtures.operator",
]
