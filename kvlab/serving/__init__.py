"""The serving engines kvlab models, one module each (``vllm``, ``lmcache``, ``sglang``, ``llama_cpp``), behind one
interface (:class:`ServingEngine`) and one registry (:data:`ENGINES`); aiconfigurator's ``sdk/backends/`` is the
model. A module holds what kvlab knows of its engine, each rule with the engine's file: the version read, the
settings to paste for a CPU (and disk) tier and the host memory they pin (``kvlab plan``), the unit it copies KV in
and its cost per copy (the link's price), how a load and a prefill compose in a TTFT, and the scheduler ``kvlab
simulate`` runs for it. ``--engine``'s choices are the engines with a CPU tier (:data:`OFFLOADING`), ``--server``'s
those whose own cache design kvlab replays (:data:`SERVERS`)."""

from decimal import Decimal

from kvlab.serving import llama_cpp, lmcache, sglang, vllm
from kvlab.serving.base import DISK_PATH, ServingEngine, gib_text, granularity_note, shown_gib
from kvlab.util.numbers import GIB

__all__ = ["ENGINES", "OFFLOADING", "SERVERS", "ServingEngine", "disk_settings", "engine_settings", "gib_text"]

ENGINES = {module.ENGINE.name: module.ENGINE for module in (vllm, lmcache, sglang, llama_cpp)}
OFFLOADING = tuple(name for name, engine in ENGINES.items() if engine.copy_us is not None)  # --engine's choices
SERVERS = tuple(engine.server for engine in ENGINES.values() if engine.server)  # replay --server's choices


def engine_settings(
    engine, cpu_gib, tp, chunk_tokens, write_policy, shape, kv_dtype="auto", replay_tokens=None, trace_tokens=None
):
    """What to pass ``engine`` (a name of :data:`OFFLOADING`) for a CPU budget of ``cpu_gib`` GiB per GPU, and the
    host memory it allocates. ``chunk_tokens`` is the engine's chunk (page) size to set, the plan's
    ``--chunk-tokens``; None leaves the engine's default. ``replay_tokens`` is the block size the plan replayed
    (``trace_tokens``: the trace's hash blocks, where it is a trace), for the note when it is coarser than the
    engine's."""
    if engine not in OFFLOADING:
        raise ValueError(f"engine must be one of {', '.join(OFFLOADING)}, got {engine!r}")
    served = ENGINES[engine]
    budget = Decimal(str(cpu_gib))  # a float as its text: 0.1 is 0.1
    found, engine_tokens, granularity, notes = served.cpu_settings(
        budget, tp, chunk_tokens, write_policy, shape, kv_dtype
    )
    if granularity is not None:
        note = granularity_note(served.title, *granularity, replay_tokens, trace_tokens)
        notes = notes + [note] if note else notes
    found["chunk_tokens"] = engine_tokens
    found["cpu_gib_effective"] = shown_gib(served.effective_bytes(budget) / GIB)
    return {"engine": engine, "version": served.version, **found, "notes": notes}


def disk_settings(engine, disk_gib, tp, flags, block_tokens):
    """``(flags, environment, notes)`` that give ``engine`` a disk tier of ``disk_gib`` GiB per GPU below the CPU tier
    that ``flags`` (the engine's CPU settings) set up."""
    size = gib_text(Decimal(str(disk_gib)))
    found, environment, notes = ENGINES[engine].disk_settings(size, tp, flags, block_tokens)
    return found, environment, [f"the disk path {DISK_PATH} is a placeholder: point it at a local NVMe drive", *notes]
