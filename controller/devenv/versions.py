"""Re-export for the dev environment (kept separate so devenv never reaches into operator internals)."""

from controller.versions import Versions, load_versions

__all__ = ["Versions", "load_versions"]
