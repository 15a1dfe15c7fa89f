"""``dynamo``: NVIDIA Dynamo's KV router (``--router-mode kv``), its default worker selector
(``lib/kv-router/src/scheduling/selector.rs`` ``DefaultWorkerSelector::worker_logit``, ai-dynamo/dynamo 01690d42;
the defaults of ``KvRouterConfig``): the instance of the lowest

    prefill_load_scale x max(0, (active prefill tokens + prompt tokens) / block - overlap credit) + decode blocks

where the overlap credit is ``overlap_score_credit`` x the prompt's blocks on the instance's GPU plus
``host_cache_hit_weight`` x those continuing on its CPU tier (the engines' KV events: ``--kv-events``, the default),
the active prefill tokens are the uncached prompt tokens of the requests the router sent it that have not streamed
their first token, and the decode blocks are the distinct prompt blocks of the requests it sent it that have not
finished, this one's included (``ActiveSequences``: ``lib/llm/src/kv_router/sequence.rs``). ``--router-temperature``
0 (the default) takes the lowest; among equals, here, the one sent the fewest requests, then the first (Dynamo: the
first in its map's order). ``decode_active_request_weight`` and the credit's decay are 0 by default, and so not
modelled."""

from collections import Counter
from dataclasses import dataclass

from kvlab.fleet.routers import products
from kvlab.fleet.routers.base import Router, least_used
from kvlab.util.files import number_in
from kvlab.util.settings import Declared, setting

GROUP = "router dynamo (kvlab/fleet/routers/dynamo.py)"
SHARE = number_in(0, 1, "a number from 0 to 1")


@dataclass(frozen=True, kw_only=True)
class Settings(Declared):
    dynamo_overlap_credit: float = setting(
        1.0, convert=SHARE, group=GROUP, help="overlap_score_credit: a GPU block held, in blocks of prefill (1)"
    )
    dynamo_prefill_load_scale: float = setting(
        1.0,
        convert=number_in(0, 1000, "a number from 0 to 1000"),
        group=GROUP,
        help="prefill_load_scale: the prefill term's weight against the decode blocks (1)",
    )
    dynamo_host_hit_weight: float = setting(
        0.75, convert=SHARE, group=GROUP, help="host_cache_hit_weight: a CPU block held, in blocks of prefill (0.75)"
    )


class Dynamo(Router):
    name = "dynamo"
    clock = True
    Settings = Settings

    def __init__(self, settings=None):
        super().__init__(settings or Settings())
        self.prefill = None  # per instance, the uncached prompt tokens of requests before their first token
        self.active = None  # per instance, each prompt block of its requests not finished: how many of them hold it
        self.requests = {}  # number -> (its uncached tokens, its distinct blocks), while it is in flight
        self.overlaps = []  # per instance, (blocks, GPU blocks) of the request being routed

    def choose(self, keys, tokens, fleet):
        if self.prefill is None:
            self.prefill = [0] * fleet.size
            self.active = [Counter() for _ in range(fleet.size)]
        settings, block = self.settings, fleet.block_tokens
        self.overlaps = [fleet.held(index, keys) for index in range(fleet.size)]
        distinct = len(set(keys))
        logits = []
        for index, (held, gpu) in enumerate(self.overlaps):
            credit = settings.dynamo_overlap_credit * gpu + settings.dynamo_host_hit_weight * (held - gpu)
            prefill = max(0.0, (self.prefill[index] + tokens) / block - credit)
            decode = len(self.active[index]) + distinct - _active_prefix(keys, self.active[index])
            logits.append(settings.dynamo_prefill_load_scale * prefill + decode)
        lowest = min(logits)
        return least_used([index for index, logit in enumerate(logits) if logit == lowest], fleet)

    def sent_to(self, index, keys, tokens, number, fleet):
        gpu = self.overlaps[index][1]
        uncached = max(0, tokens - gpu * fleet.block_tokens)
        self.prefill[index] += uncached
        blocks = set(keys)
        self.active[index].update(blocks)
        self.requests[number] = uncached, blocks

    def first_token(self, index, number):
        uncached, blocks = self.requests[number]
        self.prefill[index] -= uncached
        self.requests[number] = 0, blocks

    def finished(self, index, number):
        uncached, blocks = self.requests.pop(number)  # (refused by the engine: no first token)
        self.prefill[index] -= uncached
        active = self.active[index]
        for key in blocks:
            left = active[key] - 1
            if left:
                active[key] = left
            else:
                active.pop(key)

    def paste(self, block_tokens):
        settings = self.settings
        flags = (
            f"--router-mode kv --router-kv-overlap-score-credit {settings.dynamo_overlap_credit:g}"
            f" --router-prefill-load-scale {settings.dynamo_prefill_load_scale:g}"
            f" --router-host-cache-hit-weight {settings.dynamo_host_hit_weight:g}"
        )
        return [products.dynamo(flags, "KV events on (the default); --router-temperature 0")]


def _active_prefix(keys, active):
    """How many of the prompt's blocks are ``active``: its longest prefix there (block keys are chained, as Dynamo's
    sequence hashes: a block active on an instance has its whole prefix active there)."""
    count = 0
    for key in keys:
        if key not in active:
            break
        count += 1
    return count


ROUTER = Dynamo
