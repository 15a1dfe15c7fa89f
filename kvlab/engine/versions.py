"""vLLM's scheduler rules by version: what ``--engine-version`` chooses where the rules changed, each read from that
version's wheel (PyPI ``vllm==X``; the files and lines are 0.33.0's unless said).

Every version kvlab models keeps block 0 out of use (``vllm/v1/core/block_pool.py:191``, ``null_block``), caps a
prefix hit at ``num_tokens - 1`` in whole blocks (``vllm/v1/core/kv_cache_manager.py:302``) and caches full blocks
only (``block_pool.py`` ``cache_full_blocks``, called with ``num_tokens_to_cache`` at ``kv_cache_manager.py:621``).
What changed:

- **0.24.0** (PR #37307): a waiting or preempted request is admitted only if its whole sequence fits in the free
  blocks (``SchedulerConfig.scheduler_reserve_full_isl``, default on: ``vllm/config/scheduler.py:190``;
  ``KVCacheManager.allocate_slots(full_sequence_must_fit=...)``, ``kv_cache_manager.py:531``). 0.14.0 admits a
  request when its first chunk fits.
- **0.33.0**: the CPU tier is the OffloadingConnector's (``vllm/distributed/kv_transfer/kv_connector/v1/offloading/
  scheduler.py``), and waiting requests that hold blocks are scheduled first (``Scheduler.kv_holding_waiting``,
  ``vllm/v1/core/sched/scheduler.py:1065``). Before it, kvlab's CPU tier is its write-through policy
  (``kvlab/cache/write_policies.py``), checked beside aisimulate, not beside vLLM's own connector.

``make bench-vllm`` (``bench/vllm_side_by_side.py``) holds 0.33.0's rules against vLLM 0.33.0's own scheduler, KV
cache manager and offloading connector, request by request.
"""

import re
from dataclasses import dataclass

from kvlab.util.errors import SettingError

__all__ = ["NEWEST", "RULES", "Rules", "rules_for"]


@dataclass(frozen=True)
class Rules:
    """The rules of vLLM from ``version`` on (until the next entry of :data:`RULES`)."""

    version: str
    full_sequence_admission: bool  # scheduler_reserve_full_isl: the whole sequence must fit to be admitted
    offloading_connector: bool  # the CPU tier is vLLM's OffloadingConnector (else kvlab's write-through)


RULES = (
    Rules("0.14.0", full_sequence_admission=False, offloading_connector=False),
    Rules("0.24.0", full_sequence_admission=True, offloading_connector=False),
    Rules("0.33.0", full_sequence_admission=True, offloading_connector=True),
)
NEWEST = RULES[-1].version


def _parts(version):
    match = re.fullmatch(r"(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4}))?", str(version))
    if match is None:
        raise SettingError(f"--engine-version: expected a vLLM version such as {NEWEST}, got {version!r}")
    return tuple(int(part or 0) for part in match.groups())


def rules_for(version):
    """The rules of ``version`` (a string such as ``0.33.0``): the newest entry of :data:`RULES` not after it (the
    oldest for a version before them all)."""
    wanted = _parts(version)
    chosen = RULES[0]
    for rules in RULES:
        if _parts(rules.version) <= wanted:
            chosen = rules
    return chosen
