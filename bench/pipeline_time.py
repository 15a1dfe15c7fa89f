"""The pipeline's own time in a fresh copy, side by side in one run (issue 38's bars: a fresh regeneration at most
45 s once .venv exists; a no-op run at most 1.3x `snakemake --version`).

The project as it would be committed (tracked files and untracked ones git does not ignore) is copied into a
temporary folder without results/ and without numba's compiled kernels, as a fresh clone has it; then, each timed
there with this environment's interpreter: `kvlab run` (everything), `kvlab run` again (nothing to do) and
`snakemake --version`, the last two ``--repeat`` times each (the median). Prints a table; exit 1 where a bar is
missed.

    .venv/bin/python bench/pipeline_time.py [--cores N] [--repeat N] [--keep FOLDER]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FRESH_BAR_S = 45.0
NO_OP_BAR = 1.3


def committed_files():
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    return [name for name in listed.stdout.decode().split("\0") if name and (ROOT / name).is_file()]


def fresh_copy(folder):
    for name in committed_files():
        if name.startswith("results/"):
            continue
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, folder / name)


def timed(command, folder):
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{' '.join(map(str, command))} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="Snakemake's --cores (default: all)")
    parser.add_argument("--repeat", type=int, default=5, help="timings of the no-op and of --version (median)")
    parser.add_argument("--keep", type=Path, help="copy into this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="kvlab-pipeline-"))
    folder.mkdir(parents=True, exist_ok=True)
    fresh_copy(folder)
    run = [sys.executable, "-m", "kvlab", "run", "--", "--cores", str(args.cores), "--quiet"]
    print(f"kvlab run in a fresh copy ({folder}, {args.cores} cores) ...", flush=True)
    fresh = timed(run, folder)
    no_op = statistics.median(timed(run, folder) for _ in range(args.repeat))
    version = statistics.median(timed([BIN / "snakemake", "--version"], folder) for _ in range(args.repeat))
    if not args.keep:
        shutil.rmtree(folder)
    rows = [
        ("fresh regeneration", f"{fresh:.1f} s", f"<= {FRESH_BAR_S:.0f} s", fresh <= FRESH_BAR_S),
        ("no-op kvlab run", f"{no_op:.2f} s", "", True),
        ("snakemake --version", f"{version:.2f} s", "", True),
        ("no-op / --version", f"{no_op / version:.2f}x", f"<= {NO_OP_BAR}x", no_op / version <= NO_OP_BAR),
    ]
    print("| what | time | bar | met |\n|---|---:|---|---|")
    for what, value, bar, met in rows:
        print(f"| {what} | {value} | {bar} | {'yes' if met or not bar else 'NO'} |")
    return 0 if all(met for *_, met in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
