"""The TaoBrevJob resource as the operator reads and writes it (PURE): the pydantic models of
spec and status, spec parsing, every reason, the error hierarchy, names and timestamps."""
