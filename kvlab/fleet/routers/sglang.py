"""``sglang``: SGLang router's ``cache_aware`` policy (``sgl-router/src/policies/cache_aware.rs``
``CacheAwarePolicy::select_worker``, sgl-project/sglang b6f20641; the command line's defaults,
``py_src/sglang_router/router_args.py``). Where the load is out of balance (the most requests in flight less the
fewest above ``--balance-abs-threshold``, and the most above the fewest times ``--balance-rel-threshold``) the
request goes to the instance with the fewest in flight (the first among equals); else, where the longest prefix
the router's own tree holds covers more than ``--cache-threshold`` of the prompt, to an instance holding that
prefix, and otherwise to the instance whose tree is smallest. Either way the prompt is recorded in the tree for
the instance chosen. The load is the router's count of the requests it sent and that have not finished
(``WorkerLoadGuard``, ``core/worker.rs``). The real tree is of characters, and each instance's part is evicted
least recently used first to ``--max-tree-size`` characters every ``--eviction-interval-secs``; here it is of
blocks, bounded at every request to the same characters at four per token."""

from dataclasses import dataclass

from kvlab.fleet.routers import products
from kvlab.fleet.routers.base import Router
from kvlab.fleet.routers.index import RoutedIndex
from kvlab.util.files import number_in
from kvlab.util.settings import Declared, setting
from kvlab.workloads import whole_number

GROUP = "router sglang (kvlab/fleet/routers/sglang.py)"
MAX_TREE_CHARACTERS = 2**26  # router_args.py max_tree_size
CHARACTERS_PER_TOKEN = 4  # as llm-d's approximate prefix cache counts (approximateprefix/types.go)


@dataclass(frozen=True, kw_only=True)
class Settings(Declared):
    sglang_cache_threshold: float = setting(
        0.3,
        convert=number_in(0, 1, "a number from 0 to 1"),
        group=GROUP,
        help="the share of the prompt a cached prefix must pass to be followed (--cache-threshold; 0.3)",
    )
    sglang_balance_abs_threshold: int = setting(
        64, convert=whole_number(0), group=GROUP, help="--balance-abs-threshold: requests in flight (64)"
    )
    sglang_balance_rel_threshold: float = setting(
        1.5,
        convert=number_in(1, 1000, "a number from 1 to 1000"),
        group=GROUP,
        help="--balance-rel-threshold: a ratio of requests in flight (1.5)",
    )


class SGLang(Router):
    name = "sglang"
    clock = True
    Settings = Settings

    def __init__(self, settings=None):
        super().__init__(settings or Settings())
        self.tree = None

    def choose(self, keys, tokens, fleet):
        settings, loads = self.settings, fleet.inflight
        if self.tree is None:
            self.tree = RoutedIndex(fleet.size, MAX_TREE_CHARACTERS // (CHARACTERS_PER_TOKEN * fleet.block_tokens))
        low, high = min(loads), max(loads)
        if high - low > settings.sglang_balance_abs_threshold and high > low * settings.sglang_balance_rel_threshold:
            return loads.index(low)
        _, holders, matched = self.tree.matched(keys)
        if keys and matched / len(keys) > settings.sglang_cache_threshold:
            return holders[0]
        return min(range(fleet.size), key=lambda index: (self.tree.size(index), index))

    def sent_to(self, index, keys, tokens, number, fleet):
        self.tree.record(index, keys, leaves_first=True)

    def paste(self, block_tokens):
        settings = self.settings
        flags = (
            f"--policy cache_aware --cache-threshold {settings.sglang_cache_threshold:g}"
            f" --balance-abs-threshold {settings.sglang_balance_abs_threshold}"
            f" --balance-rel-threshold {settings.sglang_balance_rel_threshold:g}"
        )
        return [products.sglang(flags)]


ROUTER = SGLang
