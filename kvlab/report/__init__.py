"""Artifacts from other artifacts: folded sweeps (``sweep``), replay tables (``replay_table``), figures
(``plots``)."""
