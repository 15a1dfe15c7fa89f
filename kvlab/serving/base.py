"""The interface every serving engine's module implements (:class:`ServingEngine`), and what they share."""

from decimal import Decimal
from fractions import Fraction

from kvlab.util.numbers import GIB

__all__ = ["DISK_PATH", "ServingEngine", "gib_text", "granularity_note", "shown_gib"]

DISK_PATH = "/mnt/nvme/kvcache/"  # where the settings put a disk tier: a placeholder for the user's local NVMe drive


def gib_text(amount):
    """A GiB amount as an engine reads it: a plain decimal number, no exponent."""
    return format(Decimal(amount).normalize(), "f")


def shown_gib(amount):
    """An exact amount (of GiB or GB) to 4 decimals, as host_ram_gib is shown."""
    return round(float(amount), 4)


class ServingEngine:
    """What every engine module states (class attributes) and answers (methods)."""

    name = ""  # its --engine value
    title = ""  # its name in words
    version = ""  # the version its rules were read from
    block_tokens = None  # a block's tokens where no cache gives one: its default block, chunk or page
    copy_us = None  # the link's cost per copy, microseconds (None: kvlab prices no CPU tier of it)
    copy_source = ""  # where copy_us comes from
    unit = ""  # what one copy moves, in words
    composition = ""  # how a load and a prefill compose in a request's TTFT, with its source
    layerwise = None  # the composition under its layer-by-layer switch (kvlab's --layerwise), where it has one
    layer_by_layer = False  # the load runs beside the prefill, a layer at a time
    blocking_store = False  # the TTFT waits for the store of the tokens it computed
    scheduler = None  # its scheduler, where kvlab simulate models it (--scheduler, kvlab/simulator/events.py)
    window_rule = "all-layers"  # how a sliding-window layer's KV is charged in a tier (kvlab/cache/costs.py)
    server = None  # the name of its own cache design, where kvlab replays one (replay --server)

    def transfer_unit(self, block_tokens, tokens, bytes_per_token, layers):
        """Bytes one copy moves when the engine loads ``tokens`` tokens stored in ``block_tokens``-token blocks."""
        raise NotImplementedError

    def effective_bytes(self, cpu_gib):
        """The bytes per GPU the engine's setting for ``cpu_gib`` GiB per GPU really gives (exact)."""
        return Fraction(Decimal(str(cpu_gib))) * GIB

    def cpu_settings(self, budget, tp, chunk_tokens, write_policy, shape, kv_dtype):
        """``(settings, engine_tokens, granularity, notes)`` for a CPU budget of ``budget`` GiB (a Decimal) per GPU:
        ``settings`` has ``flags``, ``environment``, ``host_ram_gib`` and ``per``; ``engine_tokens`` the chunk set
        (None: the engine's own blocks); ``granularity`` ``(unit's name, tokens)`` for the note on a coarser replay,
        or None."""
        raise NotImplementedError

    def disk_settings(self, size, tp, flags, block_tokens):
        """``(flags, environment, notes)`` that give it a disk tier of ``size`` GiB (text) per GPU below the CPU
        tier that ``flags`` set up (docs/tiers.md has each rule's source)."""
        raise NotImplementedError


def granularity_note(title, chunks, engine_tokens, replay_tokens, trace_tokens):
    """A note when the replay's blocks are coarser than the engine's ``chunks``: the hit ratio is then for the
    replay's blocks (a trace cannot resolve finer ones than it was hashed in)."""
    if replay_tokens is None or replay_tokens <= engine_tokens:
        return None
    if trace_tokens == replay_tokens:
        why = f"the trace's {trace_tokens}-token hash blocks: it cannot resolve finer ones"
    else:
        why = f"{replay_tokens} tokens"
    return (
        f"the replay's unit ({why}) is coarser than {title}'s {engine_tokens}-token {chunks}:"
        f" the hit ratio is for {replay_tokens}-token blocks"
    )
