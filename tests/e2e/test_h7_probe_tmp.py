from __future__ import annotations
import json, time
from tests.fixtures.operator import Stack
from controller.devenv.prometheus import PrometheusServer

def test_probe(stack: Stack, tmp_path) -> None:
    t0 = time.monotonic()
    prom = PrometheusServer.start(tmp_path / "prom", {"op": stack.operator.metrics_url})
    print("prom ready", time.monotonic() - t0)
    prom.wait_targets_up()
    print("targets up", time.monotonic() - t0)
    stack.apply(stack.job_manifest("ok"))
    stack.apply(stack.job_manifest("bad", simulation={"exit_code": 3}))
    seen = {}
    t1 = time.monotonic()
    while time.monotonic() - t1 < 120:
        for n in ("ok", "bad"):
            o = stack.get(n)
            st = (o or {}).get("status") or {}
            key = (n, st.get("phase"), st.get("outcome"), tuple((c["type"], c["status"]) for c in st.get("conditions", [])))
            if key not in seen:
                seen[key] = round(time.monotonic() - t1, 2)
                print(key, seen[key])
                with open(f"/tmp/h7_{n}_{len(seen)}.json", "w") as f:
                    json.dump(o, f, indent=1)
        if all(((stack.get(n) or {}).get("status") or {}).get("finishedAt") for n in ("ok", "bad")):
            break
        time.sleep(0.1)
    print("finished", time.monotonic() - t1)
    import urllib.request
    m1 = urllib.request.urlopen(stack.operator.metrics_url).read().decode()
    open("/tmp/h7_metrics1.txt", "w").write(m1)
    print(prom.query("sum by (verb) (taobrev_brev_cli_calls_total)"))
    for i in range(10):
        time.sleep(1)
        print(prom.query("sum by (verb) (taobrev_brev_cli_calls_total)"))
    m2 = urllib.request.urlopen(stack.operator.metrics_url).read().decode()
    open("/tmp/h7_metrics2.txt", "w").write(m2)
    print(prom.query("taobrev_job_phase == 1"))
    print(prom.query('max_over_time(taobrev_job_phase{phase="Running"}[5m])'))
    prom.stop()
