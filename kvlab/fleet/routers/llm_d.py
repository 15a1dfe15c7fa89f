"""``llm-d``: llm-d's inference scheduler (the Gateway API Inference Extension's endpoint picker) with its default
profile: each instance scored by three scorers, each score in [0, 1] times its weight, added, and the highest total
picked (``pkg/epp/scheduling/scheduler_profile.go`` ``runScorerPlugins``; weights 3, 2, 2 in
``pkg/epp/config/loader/defaults.go`` ``loadDefaultConfig``, GIE v1.5.0 and llm-d-inference-scheduler):

- ``prefix-cache-scorer``: the prompt's blocks the instance holds over its blocks (``scorer/prefix/plugin.go``). The
  ``approximate`` index (the default profile's) is the router's own record of what it sent where, an LRU per
  instance of as many blocks as its GPU pool (``autoTune``), the walk stopping at the first block no instance holds,
  at most 256 blocks (``approximateprefix/types.go``, ``plugin.go`` ``matchLongestPrefix``). The ``precise`` one
  reads the engines' KV events (``precise-prefix-cache-scorer``, llm-d-kv-cache ``kvblock_scorer.go``
  ``LongestPrefixScorer``): the instance's blocks from the head, a GPU block weighing 1 and a CPU block 0.8,
  over the prompt's blocks (llm-d's ``absoluteScoredPods``).
- ``queue-scorer``: ``(max - waiting) / (max - min)`` over the instances' waiting requests, 1 for all where they
  are equal (``scorer/queuedepth/queue.go``).
- ``kv-cache-utilization-scorer``: 1 - the share of the GPU pool held (``kvcache_utilization.go``).

The queue and KV usage are the engines' metrics as the picker last scraped them, every ``--llm-d-refresh-ms``
(``RefreshMetricsInterval``, 50 ms: ``pkg/epp/server/options.go``). The picker breaks ties at random
(``picker/maxscore/picker.go``); here ties go to the instance sent the fewest requests, then the first."""

from dataclasses import dataclass

from kvlab.fleet.routers import products
from kvlab.fleet.routers.base import Router, least_used
from kvlab.fleet.routers.index import RoutedIndex
from kvlab.util.files import number_in
from kvlab.util.settings import Declared, setting
from kvlab.workloads import whole_number

GROUP = "router llm-d (kvlab/fleet/routers/llm_d.py)"
WEIGHT = number_in(0, 1000, "a weight from 0 to 1000")
MAX_PREFIX_BLOCKS = 256  # approximateprefix/types.go defaultMaxPrefixBlocks
CPU_BLOCK_WEIGHT = 0.8  # llm-d-kv-cache backend.go DefaultKVCacheBackendConfig: cpu 0.8, gpu 1.0


@dataclass(frozen=True, kw_only=True)
class Settings(Declared):
    llm_d_prefix_weight: float = setting(3.0, convert=WEIGHT, group=GROUP, help="prefix-cache-scorer's weight (3)")
    llm_d_queue_weight: float = setting(2.0, convert=WEIGHT, group=GROUP, help="queue-scorer's weight (2)")
    llm_d_kv_weight: float = setting(2.0, convert=WEIGHT, group=GROUP, help="kv-cache-utilization-scorer's weight (2)")
    llm_d_prefix_cache: str = setting(
        "approximate",
        choices=("approximate", "precise"),
        group=GROUP,
        help="approximate: the router's record of what it sent where (the default profile's); precise: the engines'"
        " KV events (GPU and CPU tiers)",
    )
    llm_d_lru_tokens: int | None = setting(
        None,
        convert=whole_number(1),
        group=GROUP,
        help="the approximate index's room per instance, in tokens (lruCapacityPerServer x its block; default: the"
        " instance's pool, as autoTune)",
    )
    llm_d_refresh_ms: float = setting(
        50.0,
        convert=number_in(0, 3.6e6, "milliseconds from 0 to 3,600,000"),
        group=GROUP,
        help="how often the picker scrapes the engines' queue and KV usage (RefreshMetricsInterval; default 50)",
    )


class LlmD(Router):
    name = "llm-d"
    clock = True
    Settings = Settings

    def __init__(self, settings=None):
        super().__init__(settings or Settings())
        self.index = None
        self.scraped = None  # (when, each instance's Load) last scraped

    def _metrics(self, fleet):
        interval = self.settings.llm_d_refresh_ms / 1000
        if self.scraped is None or fleet.now >= self.scraped[0] + interval:
            self.scraped = fleet.now, [fleet.load(index) for index in range(fleet.size)]
        return self.scraped[1]

    def _prefix_scores(self, keys, fleet):
        if self.settings.llm_d_prefix_cache == "precise":
            blocks = len(keys)
            scores = []
            for index in range(fleet.size):
                held, gpu = fleet.held(index, keys)
                scores.append((gpu + CPU_BLOCK_WEIGHT * (held - gpu)) / blocks if blocks else 0.0)
            return scores
        if self.index is None:  # as many blocks as the instance's pool (autoTune), or the room given
            rooms = self.settings.llm_d_lru_tokens
            self.index = RoutedIndex(fleet.size, max(1, rooms // fleet.block_tokens) if rooms else fleet.gpu_blocks)
        head = keys[:MAX_PREFIX_BLOCKS]
        counts, _, _ = self.index.matched(head)
        return [count / len(head) if head else 0.0 for count in counts]

    def choose(self, keys, tokens, fleet):
        settings = self.settings
        loads = self._metrics(fleet)
        queues = [load.waiting for load in loads]
        low, high = min(queues), max(queues)
        prefix = self._prefix_scores(keys, fleet)
        totals = [
            settings.llm_d_prefix_weight * prefix[index]
            + settings.llm_d_queue_weight * (1.0 if high == low else (high - queues[index]) / (high - low))
            + settings.llm_d_kv_weight * (1 - loads[index].kv_usage)
            for index in range(fleet.size)
        ]
        best = max(totals)
        return least_used([index for index, total in enumerate(totals) if total == best], fleet)

    def sent_to(self, index, keys, tokens, number, fleet):
        if self.settings.llm_d_prefix_cache == "approximate":
            self.index.record(index, keys[:MAX_PREFIX_BLOCKS])

    def paste(self, block_tokens):
        settings = self.settings
        precise = settings.llm_d_prefix_cache == "precise"
        prefix = "precise-prefix-cache-scorer" if precise else "prefix-cache-scorer"
        parameters = products.precise_prefix(block_tokens) if precise else ""
        scorers = [
            ("queue-scorer", settings.llm_d_queue_weight, ""),
            ("kv-cache-utilization-scorer", settings.llm_d_kv_weight, ""),
            (prefix, settings.llm_d_prefix_weight, parameters),
        ]
        note = "the engines publish KV events (vLLM: --kv-events-config)" if precise else ""
        producers = []
        if not precise and settings.llm_d_lru_tokens:  # the index's room, set rather than tuned (GIE v1.5's plugin)
            room = f"autoTune: false\nblockSizeTokens: {block_tokens}\n"
            room += f"lruCapacityPerServer: {max(1, settings.llm_d_lru_tokens // block_tokens)}"
            producers.append(("approx-prefix-cache-producer", room))
        return [products.llm_d(scorers, note, producers)]


ROUTER = LlmD
