"""``kvlab scenario``: the lab's scenario script (``kvlab/scenario.py``, standard library only), with its flags
and byte for byte its output. Its own parser prints its one-line errors and exits; here the exit becomes the
returned code."""

import json

from kvlab.cli.base import emit, exit_code


def parse(argv, prog):
    """The lab script's arguments from ``argv``; a refusal is its one line on stderr and a SystemExit (what
    ``kvlab config`` dry-parses a job line with)."""
    from kvlab import scenario as lab

    return lab.parse(argv, prog)


def main(argv, prog):
    from kvlab import scenario as lab

    def call():
        args = parse(argv, prog)
        result = lab.run(args.gpu, args.cpu, args.docs, args.tokens, args.passes, args.write_policy)
        return 0 if emit(json.dumps(result, indent=2) + "\n", prog) else 1

    return exit_code(call)
