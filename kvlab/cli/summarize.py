"""``kvlab summarize``: the lab's summary script (``kvlab/summarize.py``, standard library only), with its
arguments and byte for byte its output."""

from kvlab.cli.base import exit_code


def main(argv, prog):
    from kvlab import summarize as lab

    return exit_code(lambda: lab.main(argv, prog))
