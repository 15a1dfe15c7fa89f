"""The walk of one setting from the command line to the event loop (issue 38: "following --gpu-tokens from kvlab
simulate to the loop takes 26 stops in 15 files"), measured instead of counted by hand.

``kvlab simulate`` runs in this process under a tracer; a stop is a call of a kvlab function one of whose
arguments holds the value given to ``--gpu-tokens`` or the pool it becomes in blocks (directly, or as a field of an
argument one level down), up to the call that hands the run to the loop (``kvlab/simulator/compiled.py`` ``run``
or ``kvlab/simulator/events.py`` ``Simulator.run``). Prints the stops in order, then their count, the files and the
climbs (a stop in a higher layer than the one before it, by the layers of kvlab/__init__.py).

    .venv/bin/python bench/setting_walk.py [--gpu-tokens N] [--block-tokens N]
"""

import argparse
import contextlib
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = "data/traces/mooncake/conversation_trace.jsonl.gz"
MODEL = "models/Llama-3.1-8B-Instruct/config.json"
# kvlab/__init__.py's layers, bottom to top (the lab scripts beside them)
LAYERS = ["util", "serving", "workloads", "cache", "loop", "curves", "designs", "sizing", "latency", "simulator"]
LAYERS += ["measure", "report", "api", "workflow", "cli"]
LOOP = {("simulator/compiled.py", "run"), ("simulator/events.py", "run")}


def layer(path):
    return LAYERS.index(Path(path).parts[0].removesuffix(".py"))


def holds(value, wanted, depth=0):
    if isinstance(value, bool) or type(value).__module__.startswith("numpy"):
        return False
    if isinstance(value, (int, str)):
        return value in wanted
    if depth == 0 and isinstance(value, (list, tuple)) and len(value) < 64:
        return any(holds(item, wanted, 1) for item in value)
    if depth == 0 and isinstance(value, dict) and len(value) < 128:
        return any(holds(item, wanted, 1) for item in value.values())
    if depth == 0 and hasattr(value, "__dict__") and not isinstance(value, type):
        return any(holds(item, wanted, 1) for item in list(vars(value).values())[:64])
    return False


def walk(gpu_tokens, block_tokens):
    from kvlab.cli import main

    wanted = {gpu_tokens, str(gpu_tokens), gpu_tokens // block_tokens}
    package = ROOT / "kvlab"
    stops = []

    def tracer(frame, event, arg):
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(str(package)) or (stops and stops[-1] == "end"):
            return None
        where = (Path(code.co_filename).relative_to(package).as_posix(), code.co_name)
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        try:
            found = any(holds(frame.f_locals.get(name), wanted) for name in names)
        except Exception:  # noqa: BLE001 - a value whose comparison raises holds nothing we follow
            found = False
        if where in LOOP:
            stops.extend([where, "end"])
        elif found and (not stops or stops[-1] != where):
            stops.append(where)
        return None

    argv = ["simulate", "--workload", "mooncake", "--trace", TRACE, "--model-config", MODEL]
    argv += ["--gpu-system", "h100_sxm", "--latency-source", "roofline", "--max-num-seqs", "8"]
    argv += ["--gpu-tokens", str(gpu_tokens), "--block-tokens", str(block_tokens)]
    sys.settrace(tracer)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(argv)
    finally:
        sys.settrace(None)
    if code != 0 or stops[-1:] != ["end"]:
        raise SystemExit(f"kvlab simulate exited {code} before reaching the loop")
    return stops[:-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu-tokens", type=int, default=12352)
    parser.add_argument("--block-tokens", type=int, default=64)
    args = parser.parse_args()
    stops = walk(args.gpu_tokens, args.block_tokens)
    climbs = sum(layer(after) > layer(before) for (before, _), (after, _) in zip(stops, stops[1:], strict=False))
    for path, name in stops:
        print(f"kvlab/{path} {name}")
    print(f"{len(stops)} stops in {len({path for path, _ in stops})} files, {climbs} climbs back up")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
