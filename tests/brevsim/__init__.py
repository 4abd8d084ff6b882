"""A faithful simulator of the `brev` CLI (v0.6.327) and of what runs on a Brev instance.

Layout (moto-like: the model is apart from the wire format):
- store.py: the state directory (JSON files + fcntl locks, safe under many concurrent processes)
- model.py: PURE instance lifecycle (statuses computed lazily from timestamps and the speed factor)
- faults.py: every knob (durations and faults), declared once; record.py: the append-only call log
- backend.py: the simulated server (records, ownership, name/id resolution, lifecycle actions)
- cli.py (+ cobra.py, auth.py, catalog.py, goerr.py): the `brev` front end (flags, outputs)
- daemon.py: the ONE long-lived process (started by the harness): sshd.py, every instance's sshd
  (asyncssh, real SSH on loopback), and engine.py, detached TAO containers as threads
- native/sshwrap.c, sshconfig.py: `ssh`/`ssh-agent` recording wrappers that exec the real OpenSSH; the
  ssh config `brev refresh` writes; control.py (talking to the daemon), reaper.py (cleanup)
- docker.py, container.py, tao.py, awsbridge.py, gotemplate.py: what runs on an instance
- harness.py: `BrevSim`, the test/demo harness (SIM-CONTRACT.md, next to this file)

- zygote.py + native/zclient.c: the local `brev` and the instances' `docker`/`nvidia-smi`, native
  clients of a fork server; native.py compiles the native programs (SIM-CONTRACT.md section 11)

The executables have the state directory baked in (launch.py): `brev`, `ssh`, `ssh-agent`,
`docker` and `nvidia-smi` are native (milliseconds of CPU a call, not a Python start; the Python
programs behind the zygote use the standard library only). Only the daemon imports asyncssh.
"""
