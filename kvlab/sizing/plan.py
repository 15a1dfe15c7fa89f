"""Plan a CPU offload budget: the tokens served from GPU, from CPU and recomputed, and the GiB it takes.

The model's config.json sizes a token's KV (``kvlab/sizing/model_size.py``); the rooms in GiB become tokens
per GPU. Both tiers are LRU over chunks (LMCache's 256 tokens by default; a partial last chunk is not
stored). Under write-through the CPU figures come from the exact curve of the CPU tier at the GPU room
(``kvlab/curves/mrc.py``), so the budgets for full reuse and for the target are the smallest that reach
them. Write-back and selective have no such curve: their budgets are found by bisection over replays,
which assumes more CPU never serves less.

A model with sliding-window layers is charged by one of two rules (``window_rule``): ``all-layers``, LMCache's
(its chunks hold every layer for every token; docs/engines.md, section 4), or ``in-window``, vLLM's hybrid
allocator (the window layers only for the blocks in the last window of the request that stored them,
``kvlab/cache/costs.py``). Under ``in-window`` a block's bytes depend on the request that stored it, the
exact curve's one size per block no longer holds, and every budget is found by bisection over replays in
bytes; its token figures are then bytes over the bytes of a token of all layers, rounded up.

Under write-through (and selective) the CPU takes a copy of the blocks the GPU did not serve, so a CPU room no
larger than the GPU's mostly duplicates it: the plan says so in ``notes``, with what the CPU serves (often
nothing; docs/engines.md, section 7). A model that caches no KV per token (only recurrent state) has no
tokens in a GiB: it is refused in words.

Budgets are in GiB (2**30 bytes; the keys ending ``_gib``), as LMCache's max_local_cpu_size and vLLM's
kv_offloading_size count them (their "GB"). The command is ``kvlab plan`` (``kvlab/cli/plan.py``).
"""

import math
from fractions import Fraction
from functools import cached_property
from pathlib import Path

from kvlab.cache.costs import WINDOW_RULES, WindowCosts
from kvlab.cache.interface import CacheSettings
from kvlab.cache.prefix import Blocks
from kvlab.cache.write_policies import make_cache
from kvlab.curves.mrc import tier_curve
from kvlab.fleet import FLEET_SETTINGS
from kvlab.fleet import build as build_fleet
from kvlab.loop import ratio, replay
from kvlab.serving import ENGINES, disk_settings, engine_settings
from kvlab.sizing.model_size import gib, no_tokens, tokens_in

__all__ = ["Planner", "grid_table", "model_name", "plan", "plan_cache", "plan_rooms", "table"]

INCLUSIVE = ("write-through", "selective")  # the CPU keeps copies of blocks the GPU stores


class TierPlanner:
    """What a room of one tier gives, the rooms in front fixed: its exact curve (``curve``, under write-through), or
    replays (``per_round``) and bisection, which assumes more room never serves less."""

    curve = None  # write-through: the tier's exact curve (its base: what the tiers in front serve per round)

    def per_round(self, room):
        raise NotImplementedError

    def unlimited(self):
        """A room that never evicts."""
        raise NotImplementedError

    def hit_tokens(self, room):
        return sum(sum(row[1:]) for row in self.per_round(room))

    @cached_property
    def most_hits(self):
        """The hit tokens of an unlimited room."""
        if self.curve is not None:
            return int(self.curve.base.sum() + self.curve.final().sum())
        return self.hit_tokens(self.unlimited())

    def smallest(self, hits):
        """The smallest room at which the hit tokens reach ``hits``; None if no room does."""
        if self.curve is not None:
            return self.curve.smallest_reaching(hits - int(self.curve.base.sum()))
        if self.most_hits < hits:
            return None
        low, high = 0, self.unlimited()
        while low < high:
            middle = (low + high) // 2
            if self.hit_tokens(middle) >= hits:
                high = middle
            else:
                low = middle + 1
        return low


class Planner(TierPlanner):
    """The workload and the GPU room fixed; what a CPU room gives, per round. Rooms are in tokens, or in bytes
    with ``costs`` (:class:`kvlab.cache.costs.WindowCosts`)."""

    def __init__(
        self,
        workload,
        gpu_room,
        write_policy,
        partial_blocks,
        eviction_order,
        before_compile=None,
        meter=None,
        costs=None,
        fleet=None,
    ):
        self.workload = workload
        self.gpu_room = gpu_room
        self.write_policy = write_policy
        self.costs = costs
        self.rules = {"partial_blocks": partial_blocks, "eviction_order": eviction_order}
        self.fleet = fleet  # (instances, router, CPU scope) of a fleet (kvlab/fleet/), rooms per instance; or None
        self.pool = fleet[0] if fleet is not None and fleet[2] == "shared" else 1  # a shared tier has all the rooms
        if fleet is not None and costs is not None:
            raise ValueError("a fleet's rooms are in tokens of all layers: plan it with --window-rule all-layers")
        curved = fleet is None or (fleet[2] == "shared" and fleet[1] != "prefix")  # one LRU stack, routing CPU-blind
        if write_policy == "write-through" and costs is None and curved:
            instances = {"instances": fleet[0], "router": fleet[1]} if fleet else {}
            self.curve = tier_curve(
                workload, partial_blocks, eviction_order, gpu_room, before_compile, meter, **instances
            )

    def per_round(self, room):
        """``(input, GPU, CPU)`` tokens per round at this CPU room."""
        if self.curve is None:
            block = self.workload.block_tokens
            if self.costs is None:
                rooms = {"gpu_tokens": self.gpu_room, "cpu_tokens": room, "block_tokens": block}
                settings = CacheSettings(**rooms, write_policy=self.write_policy, **self.rules)
                cache = settings.build() if self.fleet is None else build_fleet(settings, *self.fleet)
            else:  # the reference engine with rooms in bytes
                cache = make_cache(self.write_policy, self.gpu_room, room, block, blocks=self.costs, **self.rules)
            return [(row[2], row[5], row[6]) for row in replay(self.workload, cache)]
        curve = self.curve
        return [tuple(map(int, row)) for row in zip(curve.inputs, curve.base, curve.at(room * self.pool), strict=True)]

    def instances(self, room):
        """A fleet's instances at this CPU room (per instance): what each served, as a replay reports it."""
        rooms = {"gpu_tokens": self.gpu_room, "cpu_tokens": room, "block_tokens": self.workload.block_tokens}
        fleet = build_fleet(CacheSettings(**rooms, write_policy=self.write_policy, **self.rules), *self.fleet)
        replay(self.workload, fleet)
        names = ("instance", "requests", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens")
        return [{name: one[name] for name in (*names, "token_hit_ratio")} for one in fleet.instances()]

    def smallest(self, hits):
        """As every tier's, in rooms per instance: a shared tier's curve counts the pool's."""
        found = super().smallest(hits)
        return found if found is None or self.curve is None else -(-found // self.pool)

    def unlimited(self):
        return self.unlimited_cpu

    @cached_property
    def unlimited_cpu(self):
        """A CPU room that never evicts: every distinct block the workload can store, at the most it can cost."""
        stored = StoredBlocks(self.workload.block_tokens, self.rules["partial_blocks"] == "keep", self.costs)
        replay(self.workload, stored)
        return stored.room


class DiskPlanner(TierPlanner):
    """The workload, the GPU and the CPU rooms fixed (in tokens); what a disk room gives, per round
    (``kvlab/cache/tiers.py``): under write-through the disk's exact curve at those rooms."""

    def __init__(self, planner, cpu_room, before_compile=None, meter=None):
        if planner.costs is not None:
            raise ValueError(
                "a disk tier counts its room in tokens of all layers: plan it with --window-rule all-layers"
            )
        self.planner, self.cpu_room = planner, cpu_room
        rules = planner.rules
        if planner.write_policy == "write-through":
            self.curve = tier_curve(
                planner.workload,
                rules["partial_blocks"],
                rules["eviction_order"],
                planner.gpu_room,
                before_compile,
                meter,
                cpu_tokens=cpu_room,
            )

    def per_round(self, room):
        """``(input, GPU, CPU, disk)`` tokens per round at this disk room."""
        planner = self.planner
        if self.curve is None and room:  # a replay of the three tiers
            rooms = {"gpu_tokens": planner.gpu_room, "cpu_tokens": self.cpu_room, "disk_tokens": room}
            settings = CacheSettings(
                **rooms, block_tokens=planner.workload.block_tokens, write_policy=planner.write_policy, **planner.rules
            )
            return [(row[2], row[5], row[6], row[8]) for row in replay(planner.workload, settings.build())]
        above = planner.per_round(self.cpu_room)
        disk = self.curve.at(room) if self.curve is not None else [0] * len(above)  # no room: no disk
        return [(*row, int(hits)) for row, hits in zip(above, disk, strict=True)]

    def unlimited(self):
        return self.planner.unlimited_cpu  # every distinct block the workload stores


class StoredBlocks:
    """Not a cache but a :class:`kvlab.cache.interface.Cache` that only keeps account: every distinct
    block a request can store, at the most it can cost (``costs``: :class:`kvlab.cache.costs.WindowCosts`; else
    its tokens), the size of its last request. It serves nothing (its figures are all 0); after a replay ``room``
    is the room that holds them all."""

    offline = False

    def __init__(self, block_tokens, keep_partial, costs=None):
        self.block_tokens, self.keep_partial, self.costs = block_tokens, keep_partial, costs
        self.sizes = {}  # block key -> its size

    @property
    def room(self):
        return sum(self.sizes.values())

    def foresee(self, columns):
        """Nothing to learn."""

    def serve(self, keys, tokens):
        block, sizes, costs = self.block_tokens, self.sizes, self.costs
        blocks = Blocks(keys, tokens, block, self.keep_partial)
        for index in range(blocks.stored):
            size = block if index < blocks.full else blocks.last
            sizes[keys[index]] = costs.most(size) if costs else size
        return 0, 0, 0, 0


def disk_budgets(disk, inputs, target, per_token):
    """The disk's budgets at the plan's GPU and CPU rooms: its hit ratio unlimited, its room for full reuse (and for
    ``target``), in tokens and GiB."""
    most = disk.most_hits
    full = disk.smallest(most)
    found = {
        "disk_max_token_hit_ratio": ratio(most, inputs),
        "disk_tokens_for_full_reuse": full,
        "disk_gib_for_full_reuse": gib(full, per_token),
    }
    if target is not None:
        need = math.ceil(Fraction(str(target)) * inputs)
        room = disk.smallest(need) if need <= most else None
        found["disk_tokens_for_target"] = room
        found["disk_gib_for_target"] = None if room is None else gib(room, per_token)
    return found


def inclusive_note(write_policy, cache, inputs, gpu_hits, cpu_hits):
    """Said when an inclusive CPU tier is no larger than the GPU's: it holds copies of what the GPU holds, and
    serves only blocks the GPU evicted while their CPU copy stayed (the simulator's figure, often none)."""
    head = (
        f"{write_policy}: the CPU room ({cache['cpu_tokens']:,} tokens) is no larger than the GPU's"
        f" ({cache['gpu_tokens']:,}) and takes copies of the blocks the GPU stores, so it mostly duplicates the GPU"
    )
    if not cpu_hits:
        return f"{head}: it serves nothing here, the hit ratio is the GPU's alone"
    return (
        f"{head}: here it serves {cpu_hits:,} tokens (blocks the GPU evicted while their CPU copy stayed),"
        f" hit ratio {ratio(gpu_hits + cpu_hits, inputs)} against {ratio(gpu_hits, inputs)} for the GPU alone"
    )


def round_figures(name, inputs, gpu, cpu, *disk):
    """A round's figures; with ``disk`` (its one figure), the disk tier's as well."""
    return {
        "round": name,
        "input_tokens": inputs,
        "gpu_hit_tokens": gpu,
        "cpu_hit_tokens": cpu,
        **({"disk_hit_tokens": disk[0]} if disk else {}),
        "computed_tokens": inputs - gpu - cpu - sum(disk),
        "token_hit_ratio": ratio(gpu + cpu + sum(disk), inputs),
    }


def plan_rooms(shape, tp, kv_dtype, gpu_tokens, cpu_gib, window_rule):
    """``(bytes per token, CPU tokens, costs, GPU room, CPU room)`` of a plan: the rooms in tokens, or in bytes with
    ``costs`` (:class:`kvlab.cache.costs.WindowCosts`) for a model with sliding-window layers ``in-window``."""
    per_token = shape.bytes_per_token(tp, kv_dtype, windows=True)
    cpu_tokens = tokens_in(cpu_gib, per_token)
    costs, gpu_room, cpu_room = None, gpu_tokens, cpu_tokens
    if shape.window_layers and window_rule == "in-window":
        window = shape.window_layers * shape.attention_bytes(tp, kv_dtype)
        costs = WindowCosts(per_token - window, window, shape.window)
        gpu_room, cpu_room = gpu_tokens * per_token, tokens_in(cpu_gib, 1)
    elif window_rule not in WINDOW_RULES:
        raise ValueError(f"window_rule must be one of {', '.join(WINDOW_RULES)}, got {window_rule!r}")
    return per_token, cpu_tokens, costs, gpu_room, cpu_room


def plan_cache(
    workload,
    shape,
    tp,
    kv_dtype,
    gpu_tokens,
    cpu_gib,
    write_policy,
    partial_blocks,
    eviction_order,
    window_rule="all-layers",
    disk_tokens=None,
):
    """The cache a plan's figures are those of (its rooms, its rules; a disk tier of ``disk_tokens`` below, where
    given), to replay ``workload`` through request by request (``kvlab.loop.replay`` with a ``per_request`` list):
    what prices a plan's TTFT."""
    _, _, costs, gpu_room, cpu_room = plan_rooms(shape, tp, kv_dtype, gpu_tokens, cpu_gib, window_rule)
    rules = {"partial_blocks": partial_blocks, "eviction_order": eviction_order}
    if costs is not None:  # the reference engine with rooms in bytes, as Planner.per_round's
        return make_cache(write_policy, gpu_room, cpu_room, workload.block_tokens, blocks=costs, **rules)
    rooms = {"gpu_tokens": gpu_room, "cpu_tokens": cpu_room, "block_tokens": workload.block_tokens}
    rooms["disk_tokens"] = disk_tokens or 0
    return CacheSettings(**rooms, write_policy=write_policy, **rules).build(workload)


def plan(
    workload,
    model,
    shape,
    tp,
    gpu_tokens,
    cpu_gib,
    write_policy,
    partial_blocks,
    eviction_order,
    target=None,
    before_compile=None,
    meter=None,
    kv_dtype="auto",
    engine=None,
    window_rule="all-layers",
    chunk_tokens=None,
    disk_gib=None,
    disk_tokens=None,
    fleet=None,
):
    """The planner's JSON object (see the module's docstring); ``before_compile`` and ``meter`` as
    :func:`tier_curve`'s. Rooms and budgets are per GPU; ``gpu_tokens`` counts tokens of all layers.
    ``chunk_tokens`` is the chunk asked for (``--chunk-tokens``; None: none), which the engine's settings carry;
    the replay's unit is the workload's ``block_tokens``. With ``disk_gib`` or ``disk_tokens`` (per GPU) a disk tier
    below the CPU (``kvlab/cache/tiers.py``): its figures per round at that room and the disk room for full reuse
    (and the target) at the plan's GPU and CPU rooms. With ``fleet`` ``(instances, router, CPU scope)``, a fleet of
    that many instances behind that router (``kvlab/fleet/``), every room and budget per instance. ValueError, in
    words, for a model with no KV per token."""
    refused = no_tokens(shape)
    if refused:
        raise ValueError(refused)
    per_token, cpu_tokens, costs, gpu_room, cpu_room = plan_rooms(shape, tp, kv_dtype, gpu_tokens, cpu_gib, window_rule)

    def tokens_of(room):  # a room in tokens of all layers
        return room if costs is None or room is None else -(-room // per_token)

    def gib_of(room):
        return gib(room, per_token) if costs is None else gib(room, 1)

    def room_of(amount):  # exact bytes per GPU -> a room, as cpu_room is of the budget
        return math.floor(amount / per_token) if costs is None else math.floor(amount)

    planner = Planner(
        workload, gpu_room, write_policy, partial_blocks, eviction_order, before_compile, meter, costs, fleet
    )
    disk = None
    if disk_gib is not None or disk_tokens is not None:
        disk_room = disk_tokens if disk_tokens is not None else tokens_in(disk_gib, per_token)
        # the budget as asked (as cpu_gib), or what the room in tokens takes, rounded up
        disk_budget = float(disk_gib) if disk_gib is not None else gib(disk_room, per_token)
        disk = DiskPlanner(planner, cpu_room, before_compile, meter)
        rows = disk.per_round(disk_room)
    else:
        rows = planner.per_round(cpu_room)
    totals = [sum(column) for column in zip(*rows, strict=True)] if rows else [0] * (3 if disk is None else 4)
    most = planner.most_hits
    full = planner.smallest(most)
    rules = {"window_rule": window_rule} if shape.window_layers else {}
    trace_tokens = getattr(getattr(workload, "format", None), "block_tokens", None)  # a trace's hash blocks
    result = {
        "workload": workload.describe(),
        "model": {"config": model, **shape.describe(tp, kv_dtype)},
        "cache": {
            "chunk_tokens": workload.block_tokens,
            **({"trace_block_tokens": trace_tokens} if trace_tokens else {}),
            "chunk_gib": gib(workload.block_tokens, per_token),
            "partial_blocks": partial_blocks,
            "eviction_order": eviction_order,
            "write_policy": write_policy,
            "eviction": "lru",
            **rules,
            "gpu_tokens": gpu_tokens,
            "gpu_gib": gib(gpu_tokens, per_token),
            "cpu_gib": float(cpu_gib),
            "cpu_tokens": cpu_tokens,
            **({} if disk is None else {"disk_gib": disk_budget, "disk_tokens": disk_room}),
            **({} if fleet is None else dict(zip(FLEET_SETTINGS, fleet, strict=True))),
        },
        **{key: value for key, value in round_figures("all", *totals).items() if key != "round"},
        "rounds": [round_figures(name, *row) for name, row in zip(workload.rounds, rows, strict=True)],
        "max_token_hit_ratio": ratio(most, totals[0]),
        "cpu_tokens_for_full_reuse": tokens_of(full),
        "cpu_gib_for_full_reuse": gib_of(full),
    }
    if target is not None:
        need = math.ceil(Fraction(str(target)) * totals[0])  # the ratio as written: 0.9 is 9/10
        found = planner.smallest(need) if need <= most else None
        result["target_hit_ratio"] = target
        result["cpu_tokens_for_target"] = tokens_of(found)
        result["cpu_gib_for_target"] = None if found is None else gib_of(found)
    if disk is not None:
        result |= disk_budgets(disk, totals[0], target, per_token)
    if write_policy in INCLUSIVE and 0 < cpu_room <= gpu_room:
        result["notes"] = [inclusive_note(write_policy, result["cache"], *totals[:3])]
    if fleet is not None:
        result["instances"] = planner.instances(cpu_room)
        result["router"] = router_settings(fleet[1], engine, chunk_tokens)
    if engine is not None:
        settings = engine_settings(
            engine, cpu_gib, tp, chunk_tokens, write_policy, shape, kv_dtype, workload.block_tokens, trace_tokens
        )
        room = room_of(ENGINES[engine].effective_bytes(cpu_gib))
        if room == cpu_room:
            given = totals
        else:  # the plan's figures at the CPU room the setting gives
            rows = DiskPlanner(planner, room).per_round(disk_room) if disk else planner.per_round(room)
            given = [sum(column) for column in zip(*rows, strict=True)] or [0, 0, 0]
        notes = settings.pop("notes")
        if disk is not None:
            block = chunk_tokens or workload.block_tokens
            flags, environment, said = disk_settings(engine, result["cache"]["disk_gib"], tp, settings["flags"], block)
            settings["flags"] = flags
            settings["environment"] = settings["environment"] | environment
            notes += said
        settings["cpu_tokens"] = math.floor(ENGINES[engine].effective_bytes(cpu_gib) / per_token)
        settings["token_hit_ratio"] = ratio(sum(given[1:]), given[0])
        if room != cpu_room and given[0]:
            notes.append(
                f"at what the setting gives ({settings['cpu_gib_effective']} GiB per GPU) the hit ratio is"
                f" {settings['token_hit_ratio']}; the plan's {result['token_hit_ratio']} is for {float(cpu_gib)} GiB"
            )
        result["engine"] = {**settings, "notes": notes}
    return result


def router_settings(router, engine, chunk_tokens):
    """What to give the real routers for ``router``'s rule (``kvlab/fleet/routers/``), for ``engine``'s KV block (the
    plan's ``chunk_tokens`` where given; LMCache's engine is vLLM's)."""
    from kvlab.fleet.routers import ROUTERS

    block = chunk_tokens or ENGINES["sglang" if engine == "sglang" else "vllm"].block_tokens
    return {"router": router, "settings": [paste.describe() for paste in ROUTERS[router]().paste(block)]}


def router_lines(router):
    """The routers' settings for people: each product, what to paste, its source and how it differs."""
    lines = ["", f"routers, for {router['router']} routing:"]
    for paste in router["settings"]:
        lines.append(f"  {paste['router']} ({paste['source']}):")
        lines += [f"    {line}" for line in paste["setting"].splitlines()]
        if paste["note"]:
            lines.append(f"    note: {paste['note']}")
    return lines


def table(result):
    """The plan for people: the setting, the rounds, the budgets."""
    import pandas as pd

    cache = result["cache"]
    rooms = room_parts(cache)
    lines = [model_line(result), "; ".join([rooms["gpu"], rooms["cpu"], rules_part(cache)]), ""]
    if "disk" in rooms:
        lines.insert(2, f"{rooms['disk']}, below the CPU, LRU")
    if "instances" in cache:
        shared = cache["cpu_scope"] == "shared"
        tier = f"one CPU tier of {cache['instances']} x the budget, shared" if shared else "each its own CPU tier"
        lines.insert(
            2,
            f"fleet: {cache['instances']} instances, {cache['router']} routing, {tier}; rooms and budgets per instance",
        )
    rows = pd.DataFrame([*result["rounds"], {**result, "round": "all"}])
    disk = ["disk_hit_tokens"] if "disk_tokens" in cache else []
    rows = rows[
        ["round", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", *disk, "computed_tokens", "token_hit_ratio"]
    ]
    rows.columns = [
        "round",
        "input",
        "from GPU",
        "from CPU",
        *(["from disk"] if disk else []),
        "recomputed",
        "hit ratio",
    ]
    lines.append(rows.to_string(index=False))
    lines.append("")
    lines += budget_lines(result)
    lines += [f"note: {note}" for note in result.get("notes", [])]
    if "engine" in result:
        lines += engine_lines(result["engine"])
    if "router" in result:
        lines += router_lines(result["router"])
    if "ttft" in result:
        lines += ttft_lines(result["ttft"])
    if "load" in result:
        lines += load_lines(result["load"])
    if "cost" in result:
        lines += cost_lines(result["cost"])
    lines += ["", verdict_line(result["verdict"])]
    return "\n".join(lines) + "\n"


def verdict_line(said):
    """Does offloading help here, for people (kvlab/sizing/verdict.py)."""
    return f"offloading helps? {said['line']}"


def cost_lines(cost):
    """What the plan costs per hour (``--prices``), and where the prices come from."""
    per_hour, currency = cost["per_hour"], cost["currency"]
    parts = f"{cost['gpus']} GPU x {cost['gpu_hour']:g}: {per_hour['gpus']:g}"
    parts += f", host memory {per_hour['host_memory']:g}, disk {per_hour['disk']:g}"
    return [
        "",
        f"cost: {per_hour['total']:g} {currency} per hour ({parts}); prices {cost['prices']}",
        f"  GPU: {cost['gpu_source']}",
        f"  host memory: {cost['host_memory_gib_hour']:g} per GiB-hour, {cost['host_memory_source']}",
        f"  disk: {cost['disk_tib_hour']:g} per TiB-hour, {cost['disk_source']}",
    ]


def model_line(result):
    """The model and its chunk for people."""
    model, cache = result["model"], result["cache"]
    return (
        f"model: {model['layers']} layers x {model['kv_heads_per_gpu']} KV heads per GPU x head dim {model['head_dim']}"
        f" x {model['dtype']} = {model['bytes_per_token']:,} bytes per token (tp {model['tp']});"
        f" a chunk of {cache['chunk_tokens']} tokens is {cache['chunk_gib']} GiB"
        + (
            f" (the replay's unit; the trace is hashed in {cache['trace_block_tokens']}-token blocks)"
            if "trace_block_tokens" in cache
            else ""
        )
    )


def room_parts(cache):
    """Each tier's room for people: ``gpu``, ``cpu`` (a node's share where the budget was the node's), ``disk``."""
    parts = {
        "gpu": f"GPU: {cache['gpu_tokens']:,} tokens ({cache['gpu_gib']} GiB)",
        "cpu": f"CPU: {cache['cpu_gib']} GiB = {cache['cpu_tokens']:,} tokens"
        + (
            f" ({cache['cpu_gib_per_node']} GiB per node over its {cache['ranks_per_node']} ranks)"
            if "cpu_gib_per_node" in cache
            else ""
        ),
    }
    if "disk_tokens" in cache:
        parts["disk"] = f"disk: {cache['disk_gib']} GiB = {cache['disk_tokens']:,} tokens"
    return parts


def rules_part(cache):
    """How the tiers are filled and emptied, for people."""
    return f"{cache['write_policy']}, LRU" + (
        f"; window layers: {cache['window_rule']}" if "window_rule" in cache else ""
    )


def budget_lines(result):
    """The budgets for people: full reuse (and the target) of the CPU, and of the disk at the plan's CPU room."""
    lines = []
    for tier in ("cpu", "disk") if "disk_tokens" in result["cache"] else ("cpu",):
        full = result[f"{tier}_tokens_for_full_reuse"]
        most = result["max_token_hit_ratio" if tier == "cpu" else "disk_max_token_hit_ratio"]
        at, shown = ("", "CPU") if tier == "cpu" else (" at this CPU room", "disk")
        lines.append(
            f"full reuse (hit ratio {most}){at}: {result[f'{tier}_gib_for_full_reuse']} GiB of {shown}"
            f" ({full:,} tokens)"
        )
        if "target_hit_ratio" in result:
            found = result[f"{tier}_tokens_for_target"]
            answer = (
                "unreachable"
                if found is None
                else f"{result[f'{tier}_gib_for_target']} GiB of {shown} ({found:,} tokens)"
            )
            lines.append(f"hit ratio {result['target_hit_ratio']}{at}: {answer}")
    return lines


def load_lines(load, figures=True):
    """The time under load for people: TTFT percentiles and throughput (kvlab simulate); without ``figures`` only
    what they are of (a grid's table has them)."""
    ttft = load["ttft_ms"]
    arrivals = ", ".join(f"{key} {value}" for key, value in load["arrivals"].items())
    return [
        "",
        f"under load ({arrivals}; kvlab simulate, {load['latency_source']}):"
        + ("" if figures else " the table's load"),
        *(
            [
                f"  TTFT p50 {ttft['p50']} ms, p90 {ttft['p90']} ms, p99 {ttft['p99']} ms;"
                f" {load['requests_per_s']} requests/s, {load['output_tokens_per_s']} output tokens/s,"
                f" {load['preemptions']} preemptions"
            ]
            if figures
            else []
        ),
        *([f"  note: {load['note']}"] if "note" in load else []),
    ]


def ttft_lines(ttft, rounds=True):
    """The predicted TTFT for people: p50 and p99 per round and in all (without ``rounds``: a grid's table has
    them), and what priced them."""
    latency = ttft["latency"]
    lines = [
        "",
        f"predicted TTFT per request ({latency['engine']} on {latency['gpu_system']}, tp {latency['tp']},"
        f" {latency['latency_source']}):" + ("" if rounds else " the table's, all rounds together"),
    ]
    for row in [*ttft["rounds"], {**ttft["all"], "round": "all"}] if rounds else []:
        lines.append(f"  {row['round']}: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms")
    lines.append(f"  source: {latency['prefill']}; {latency['composition']}")
    return lines


def setting_items(engine):
    """The engine's setting, item by item: each export, each flag with its value (shell-quoted)."""
    import shlex

    items = [f"export {name}={shlex.quote(value)}" for name, value in engine["environment"].items()]
    flags = []
    for word in engine["flags"]:
        if flags and not word.startswith("-"):
            flags[-1] += f" {shlex.quote(word)}"
        else:
            flags.append(shlex.quote(word))
    return items + flags


def engine_lines(engine, shared=None):
    """The engine's settings for people: what to paste, and what the host gives; in a grid (``shared``: the items of
    the setting every point has) the rest of the setting and the host's figures are the table's."""
    items = setting_items(engine) if shared is None else shared
    flags = [item for item in items if not item.startswith("export ")]
    lines = ["", f"{engine['engine']} {engine['version']}, per {engine['per']}:"]
    lines += [f"  {item}" for item in items if item.startswith("export ")]
    if flags:
        lines.append(f"  {' '.join(flags)}")
    if engine.get("chunk_tokens") is not None:
        lines.append(f"  chunk (page) it is set to: {engine['chunk_tokens']} tokens")
    if shared is None:
        lines.append(f"  host memory it allocates: {engine['host_ram_gib']} GiB")
    if "cpu_tokens" in engine and shared is None:
        lines.append(
            f"  what it holds per GPU: {engine['cpu_gib_effective']} GiB = {engine['cpu_tokens']:,} tokens,"
            f" hit ratio {engine['token_hit_ratio']}"
        )
    lines += [f"  note: {note}" for note in engine["notes"]]
    return lines


# (heading, the column of kvlab.plan's grid frame) of a grid's table, in order; a room (the first seven) is a column
# where it changes, else said once above
GRID_COLUMNS = (
    ("GPU tokens", "gpu_tokens"),
    ("GPU GiB", "gpu_gib"),
    ("CPU GiB per node", "cpu_gib_per_node"),
    ("CPU GiB", "cpu_gib"),
    ("CPU tokens", "cpu_tokens"),
    ("disk GiB", "disk_gib"),
    ("disk tokens", "disk_tokens"),
    ("from GPU", "gpu_hit_tokens"),
    ("from CPU", "cpu_hit_tokens"),
    ("from disk", "disk_hit_tokens"),
    ("recomputed", "computed_tokens"),
    ("hit ratio", "token_hit_ratio"),
    ("TTFT p50 ms", "ttft.all.p50_ms"),
    ("TTFT p99 ms", "ttft.all.p99_ms"),
    ("load TTFT p50 ms", "load.ttft_ms.p50"),
    ("load TTFT p99 ms", "load.ttft_ms.p99"),
    ("requests/s", "load.requests_per_s"),
    ("output tokens/s", "load.output_tokens_per_s"),
    ("preemptions", "load.preemptions"),
    ("host GiB", "engine.host_ram_gib"),
)
ROOMS = 7  # the rooms lead GRID_COLUMNS


def grid_table(results, rows, labels):
    """A grid of plans for people (``results``: each point's plan; ``rows``: its row of kvlab.plan's grid frame;
    ``labels``: its flags): one table, a row per point (the rooms that change, the tokens from each tier, the hit
    ratio, the TTFT alone and under load, the engine's host memory and the part of its setting that changes), and
    the lines every point shares once; a line of some points only is said after each one's flags."""

    def cell(value):
        return "-" if value is None or value != value else str(value)  # NaN: a figure the point lacks

    first, cache = results[0], results[0]["cache"]
    rooms = [room_parts(result["cache"]) for result in results]
    shared = [part for name, part in rooms[0].items() if all(parts.get(name) == part for parts in rooms)]
    if "ranks_per_node" in cache and rooms[0]["cpu"] not in shared:
        shared.append(f"CPU: per GPU, the node's over its {cache['ranks_per_node']} ranks")
    lines = [
        model_line(first),
        "; ".join([*shared, rules_part(cache)]),
        f"input: {first['input_tokens']:,} tokens in {len(first['rounds'])} rounds (each round's figures: --format"
        " json)",
        "",
    ]
    changes = [
        (heading, key)
        for number, (heading, key) in enumerate(GRID_COLUMNS)
        if key in rows[0] and (number >= ROOMS or len({cell(row[key]) for row in rows}) > 1)
    ]
    columns = {heading: [cell(row[key]) for row in rows] for heading, key in changes}
    items = [setting_items(result["engine"]) if "engine" in result else [] for result in results]
    common = [item for item in items[0] if all(item in own for own in items)]
    if any(len(own) > len(common) for own in items):
        columns["setting"] = ["; ".join(item for item in own if item not in common) or "-" for own in items]
    widths = [max(map(len, [heading, *cells])) for heading, cells in columns.items()]
    for row in zip(*([heading, *cells] for heading, cells in columns.items()), strict=True):
        cells = [
            text.ljust(width) if heading == "setting" else text.rjust(width)
            for text, width, heading in zip(row, widths, columns, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    sections = [
        [*budget_lines(result), *(f"note: {note}" for note in result.get("notes", [])), verdict_line(result["verdict"])]
        for result in results
    ]
    lines += ["", *once(sections, labels)]
    for key, lines_of in (
        ("engine", lambda block: engine_lines(block, common)),
        ("ttft", lambda block: ttft_lines(block, rounds=False)),
        ("load", lambda block: load_lines(block, figures=False)),
    ):
        if key in first:
            lines += once([lines_of(result[key]) for result in results], labels)
    return "\n".join(lines) + "\n"


def once(sections, labels):
    """A section's lines that every point has, once (in the first point's order), then each point's own after its
    label."""
    common = [line for line in sections[0] if all(line in lines for lines in sections)]
    return common + [
        f"{line[: len(line) - len(line.lstrip())]}at {label}: {line.strip()}"
        for label, lines in zip(labels, sections, strict=True)
        for line in lines
        if line not in common
    ]


def model_name(path):
    """What names a model config in the output: its folder (a Hugging Face repository's name), not a full path."""
    path = Path(path)
    return path.parent.name if path.name == "config.json" and path.parent.name else path.name
