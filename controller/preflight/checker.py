"""The pre-flight: everything that can be verified without a GPU, verified before `brev create`.

A Pending job's pass asks for a verdict before it asks the quotas for a slot (so a job that cannot
start holds none). In order, each check only when the ones it needs passed:

1. the image reference is well formed (pure: controller/preflight/checks.py);
2. every referenced Secret and key exists and may be read (the job's own credentials);
3. with those keys, the results location is writable and every input holds objects
   (controller/s3_checks.py);
4. the instance selection can be satisfied at a known price (`brev search --json`, the catalog
   the price book already caches; a reused instance skips this).

Problems come back as data (`steps.Verdict`); the pure machine decides what they mean
(wait Pending, or fail after spec.timeouts.pendingSeconds). A passing verdict is reused for
`max_age` seconds, so a queued job's passes do not repeat the S3 calls; a failing one is redone
on every re-check. Only a Kubernetes API failure raises (the pass's retry layer handles it).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime

import structlog

from controller.api.errors import KubeAccessDenied, PermanentError, TaoBrevError
from controller.api.models import TaoBrevJobSpec
from controller.api.reasons import CATALOG_UNAVAILABLE, SECRET_NOT_FOUND, SECRET_NOT_READABLE
from controller.brev.envfile import JobSecrets
from controller.effects.pricing import PriceBook
from controller.kube.secret_arrivals import SecretArrivals, SecretKey
from controller.lifecycle.steps import Problem, Verdict
from controller.preflight.checks import image_problems, selection_problems
from controller.preflight.s3 import S3Checks, S3Target

log = structlog.get_logger("taobrev.preflight")

SecretLoader = Callable[[str, TaoBrevJobSpec], Awaitable[JobSecrets]]


class Preflight:
    def __init__(
        self,
        *,
        load_secrets: SecretLoader,
        read_secret: Callable[[str, str], Awaitable[Mapping[str, bytes] | None]],
        s3: S3Checks,
        prices: PriceBook | None,
        arrivals: SecretArrivals | None = None,
        helper_images: tuple[str, ...] = (),
        max_age: float = 300.0,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load_secrets = load_secrets
        self._read_secret = read_secret
        self._s3 = s3
        self._prices = prices
        self._arrivals = arrivals
        # Pulled on the instance besides the job's own image (the aws-cli for S3 transfers).
        self._helper_images = helper_images
        self._max_age = max_age
        self._clock = clock
        self._monotonic = monotonic
        # uid -> (when, verdict) of the last passing check; uid -> Secrets it waits for.
        self._passed: dict[str, tuple[float, Verdict]] = {}
        self._missing: dict[str, tuple[SecretKey, ...]] = {}

    def forget(self, uid: str) -> None:
        self._passed.pop(uid, None)
        self._missing.pop(uid, None)

    async def verdict(self, namespace: str, spec: TaoBrevJobSpec, job_id: str, uid: str) -> Verdict:
        kept = self._passed.get(uid)
        if kept is not None and self._monotonic() - kept[0] < self._max_age:
            return kept[1]
        verdict = await self._check(namespace, spec, job_id, uid)
        if verdict.passed:
            self._passed[uid] = (self._monotonic(), verdict)
        else:
            self._passed.pop(uid, None)
            log.info(
                "pre-flight found problems",
                problems=[f"{p.field}: {p.reason}" for p in verdict.problems],
            )
        return verdict

    async def wait(self, uid: str, seconds: float) -> None:
        """The job waits for its re-check: wake it early when a Secret it misses appears."""
        missing = self._missing.get(uid)
        if self._arrivals is None or not missing:
            # Nothing to watch for: the daemon sleeps the backoff as usual.
            return
        await self._arrivals.wait(missing, seconds, uid)

    def waits_for_secrets(self, uid: str) -> bool:
        return bool(self._missing.get(uid)) and self._arrivals is not None

    def interrupt(self, uid: str) -> None:
        if self._arrivals is not None:
            self._arrivals.interrupt(uid)

    async def _check(self, namespace: str, spec: TaoBrevJobSpec, job_id: str, uid: str) -> Verdict:
        now = self._clock()
        fields = (
            [f"spec.steps[{i}].image" for i in range(len(spec.steps))] if spec.steps else ["spec.task.image"]
        )
        images = [step.image or "" for step in spec.workflow()]
        problems: list[Problem] = [
            p for f, i in zip(fields, images, strict=True) for p in image_problems(i, f)
        ]
        self._missing.pop(uid, None)
        secrets: JobSecrets | None = None
        try:
            secrets = await self._load_secrets(namespace, spec)
        except PermanentError as exc:
            # A missing Secret or key (SecretNotFound), or one the operator may not use without
            # its label (SecretNotAllowed): the message names the field and the fix.
            problems.append(Problem("spec.credentials", exc.reason or SECRET_NOT_FOUND, str(exc)))
            self._missing[uid] = await self._absent(namespace, spec)
        except KubeAccessDenied as exc:
            problems.append(
                Problem(
                    "spec.credentials",
                    SECRET_NOT_READABLE,
                    f"{exc}; the operator may not read Secrets in namespace {namespace}: grant its "
                    "ServiceAccount `get` on secrets there (python3 deploy/tools/job_namespaces.py "
                    f"{namespace} | kubectl apply -f -)",
                )
            )
        if secrets is not None:
            target = S3Target(
                endpoint_url=spec.data.s3_endpoint_url,
                region=spec.data.s3_region,
                credentials=secrets.s3,
                secret=f"{namespace}/{spec.credentials.s3.name}",
            )
            problems += await self._s3.check(
                target, spec.data.results_uri, [i.uri for i in spec.data.inputs], job_id
            )
        candidates: list[tuple[str, float | None]] = []
        ephemeral = spec.instance.ephemeral
        if ephemeral is not None and self._prices is not None:
            try:
                catalog = await self._prices.catalog()
            except TaoBrevError as exc:
                problems.append(
                    Problem(
                        "spec.instance.ephemeral",
                        CATALOG_UNAVAILABLE,
                        f"the instance selection could not be checked: {exc}; retrying (Brev's "
                        "public catalog, used by `brev search`, did not answer)",
                    )
                )
            else:
                found, candidates = selection_problems(ephemeral, catalog)
                problems += found
        return Verdict(
            checked_at=now,
            problems=tuple(problems),
            candidates=tuple(candidates),
            images=(*spec.images(), *self._helper_images),
        )

    async def _absent(self, namespace: str, spec: TaoBrevJobSpec) -> tuple[SecretKey, ...]:
        """The Secrets the job names that do not exist: whichever appears, the job checks again
        at once. (A key missing from an existing Secret is found by the backoff's re-check.)"""
        creds = spec.credentials
        extra = [e.secret_key_ref.name for e in creds.extra_env or ()]
        names = [creds.ngc_api_key.name, creds.s3.name, *extra]
        absent: list[SecretKey] = []
        for name in dict.fromkeys(names):
            try:
                if await self._read_secret(namespace, name) is None:
                    absent.append((namespace, name))
            except TaoBrevError:
                continue  # not readable now: the re-check says so
        return tuple(absent)
