"""What the Snakefile needs: config loading and checks, targets and result paths, command lines per rule, code and
settings stamps, the job runner, ``run`` and ``check``. Never imports :mod:`kvlab.cli`: the Snakefile hands it the
command table."""
