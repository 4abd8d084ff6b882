"""`python -m controller.plugin ...` is `kubectl taobrev ...` (the krew shim runs it this way)."""

from controller.plugin import main

raise SystemExit(main())
