"""A faithful simulator of the `brev` CLI (v0.6.327) and of what runs on a Brev instance.

Layout (moto-like: the model is apart from the wire format):
- store.py: the state directory (JSON files + fcntl locks, safe under many concurrent processes)
- model.py: PURE instance lifecycle (statuses computed lazily from timestamps and the speed factor)
- faults.py: every knob (durations and faults), declared once; record.py: the append-only call log
- backend.py: the simulated server (records, ownership, name/id resolution, lifecycle actions)
- cli.py (+ cobra.py, auth.py, catalog.py, goerr.py): the `brev` front end (flags, outputs)
- ssh.py: the `ssh` (and `ssh-agent`) stand-ins
- docker.py, container.py, tao.py, awsbridge.py, gotemplate.py: what runs on an instance
- harness.py: `BrevSim`, the test/demo harness (SIM-CONTRACT.md, next to this file)

The executables are tiny Python scripts with the state directory baked in (launch.py); they run
with `python -IS` and import only the standard library, so one `brev` call costs tens of ms.
"""
