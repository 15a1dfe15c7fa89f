"""One engine instance, set up and run: what ``kvlab.simulate`` asks of the simulator. Its GPU pool decided
(``--gpu-blocks``, ``--gpu-tokens``, or the engine's memory rule: :func:`kvlab.serving.vllm.gpu_pool`), the settings
the simulator does not model refused, vLLM's rules chosen by version, its CPU tier (vLLM 0.33's OffloadingConnector or
a write policy of ``kvlab/cache/``) and its implementation (the compiled loop where it serves the run within
``--max-memory``, else the Python simulator, the same figures either way)."""

from dataclasses import dataclass

from kvlab.util.errors import SettingError

__all__ = ["CACHE_RULES", "Instance"]

CACHE_RULES = (  # kvlab replay's cache flags that simulate takes, with the values its engine models
    "partial_blocks",
    "eviction_order",
    "write_policy",
    "gpu_eviction",
    "cpu_eviction",
    "touch_cpu_on_gpu_hit",
    "re_store_on_gpu_hit",
)
MODELLED = {"partial_blocks": "drop", "gpu_eviction": "lru", "cpu_eviction": "lru"}  # vLLM's block pool's only


@dataclass(frozen=True)
class Instance:
    """An engine instance's settings, checked: ``made`` (the workload), ``engine``
    (:class:`kvlab.simulator.settings.EngineSettings`), ``chosen`` (:class:`kvlab.cache.interface.CacheSettings`),
    ``model`` (:class:`kvlab.latency.hardware.HardwareModel`), the pool (``gpu_blocks``, ``usable`` of them: vLLM's
    null block aside, ``pool_from``), ``cpu_blocks``, and vLLM's ``rules`` with ``rules_from``."""

    made: object
    engine: object
    chosen: object
    model: object
    gpu_blocks: int
    usable: int
    pool_from: object
    cpu_blocks: int
    rules: object
    rules_from: object

    @classmethod
    def of(cls, made, engine, cache_rules, gpu_tokens, cpu_tokens, model):
        """The instance of these settings; SettingError, in the command's words, for one it cannot run."""
        from kvlab.cache.interface import CacheSettings
        from kvlab.serving.vllm import gpu_pool

        block = made.block_tokens
        pool_from = "--gpu-blocks"
        if engine.gpu_blocks is not None:
            gpu_blocks = engine.gpu_blocks
        elif gpu_tokens is not None:
            gpu_blocks, pool_from = int(gpu_tokens) // block, "--gpu-tokens"
        else:
            rule = gpu_pool(model, block, engine.gpu_memory_utilization, engine.max_num_batched_tokens)
            gpu_blocks, pool_from = rule.blocks, rule.describe()
        cpu_blocks = engine.cpu_blocks if engine.cpu_blocks is not None else int(cpu_tokens or 0) // block
        try:
            chosen = CacheSettings(
                gpu_tokens=gpu_blocks * block, cpu_tokens=cpu_blocks * block, block_tokens=block, **cache_rules
            )
        except (ValueError, TypeError) as error:
            raise SettingError(str(error)) from None
        for name, modelled in MODELLED.items():
            value = getattr(chosen, name)
            if value != modelled:
                raise SettingError(
                    f"argument --{name.replace('_', '-')}: kvlab simulate models {modelled} only (vLLM's block pool),"
                    f" got {value}"
                )
        rules, rules_from = _rules(model)
        usable = gpu_blocks - 1 if engine.scheduler == "vllm" else gpu_blocks  # vLLM's null block
        if usable < 1:
            raise SettingError(
                f"argument --gpu-blocks: the engine needs a GPU pool of at least {gpu_blocks - usable + 1} blocks"
                + (" (vLLM keeps block 0 out of use: its null block)" if usable < gpu_blocks else "")
            )
        return cls(made, engine, chosen, model, gpu_blocks, usable, pool_from, cpu_blocks, rules, rules_from)

    def footprint(self, per_request, instances=1):
        """What the run holds (kvlab/util/memory.py): per request its four times (typed arrays, up to twice while
        they grow, and the copies the percentiles take) and, if kept, its table row (a tuple, the frame, the CSV
        text), and in a fleet of ``instances`` its instance and its number there; per distinct block the dense ids
        of blocks cut from a trace block; fixed, reading the trace (its batch of lines: what every trace reader
        holds, one for a fleet) and each instance's GPU pool's and CPU tier's entries (an OrderedDict entry and its
        key each). A waiting request holds more (kvlab/simulator/events.py: the simulator checks its queue)."""
        from kvlab.cache.compiled import READING_BYTES
        from kvlab.simulator.compiled import ROW_BYTES
        from kvlab.simulator.fleet import FLEET_REQUEST_BYTES
        from kvlab.util.memory import Footprint

        per = 96 + (ROW_BYTES if per_request else 0) + (FLEET_REQUEST_BYTES if instances > 1 else 0)
        interned = getattr(self.made, "split", 1) > 1
        fixed = READING_BYTES + 150 * (self.gpu_blocks + self.cpu_blocks) * instances
        return Footprint(request=per, key=24 if interned else 0, fixed=fixed)

    def run(self, cost, arrivals, meter, per_request):
        """The run's :class:`kvlab.simulator.events.SimulatorStats`: the compiled loop's where it serves the run
        within ``meter`` (--max-memory), else the Python simulator's."""
        from kvlab.simulator import compiled
        from kvlab.util.memory import MemoryLimitError

        made, engine, rules, chosen = self.made, self.engine, self.rules, self.chosen
        block, tail_first = chosen.block_tokens, chosen.eviction_order == "tail-first"
        if compiled.compiles(made, engine, rules, chosen, arrivals):
            try:
                rooms = self.usable, self.cpu_blocks, block
                return compiled.run(made, engine, rules, *rooms, cost, arrivals, per_request, tail_first, meter)
            except MemoryLimitError:
                if made.trace == "-":  # standard input cannot be read again
                    raise
                # The compiled loop's state per distinct block would pass --max-memory: the Python simulator holds only
                # what is in flight and in the tiers. It reads the trace again (the same outputs either way).
                meter.projected = 0
        simulator = self.simulator(cost, per_request)
        simulator.meter = meter
        timed = _metered(made, meter)
        return simulator.run(
            timed if arrivals.kind == "clients" else arrivals.open_times(timed, getattr(made, "trace", None)),
            arrivals.clients,
        )

    def run_fleet(self, cost, arrivals, meter, per_request, fleet, router):
        """A fleet of copies of this instance on one clock (kvlab/simulator/fleet.py): ``fleet``
        (:class:`kvlab.simulator.fleet.FleetSettings`) says how many, whether their CPU tier is shared (one tier of
        all their rooms, read across hosts) and whether prefill is apart from decode (the prefill instances behind
        ``router``, the decode instances without a CPU tier); the fleet, and each instance's
        :class:`kvlab.simulator.events.SimulatorStats` (the prefill instances' first)."""
        from dataclasses import replace

        from kvlab.fleet.routers import ROUTERS
        from kvlab.simulator import compiled
        from kvlab.simulator.fleet import RemoteKV, SharedHosts, TimedFleet
        from kvlab.util.memory import MemoryLimitError

        made, engine, chosen = self.made, self.engine, self.chosen
        private = fleet.cpu_scope == "private" or not self.cpu_blocks
        if private and not fleet.disaggregated and compiled.compiles(made, engine, self.rules, chosen, arrivals):
            from kvlab.simulator.compiled_fleet import CompiledFleet

            tail_first = chosen.eviction_order == "tail-first"
            rooms = self.usable, self.cpu_blocks, chosen.block_tokens
            timed_fleet = CompiledFleet(engine, self.rules, *rooms, tail_first, router, fleet.size)
            try:
                return timed_fleet, timed_fleet.run(made, arrivals, cost, meter, per_request)
            except MemoryLimitError:
                if made.trace == "-":  # standard input cannot be read again
                    raise
                meter.projected = 0  # the Python engine holds only what is in flight and in the tiers (as run's)
                router = type(router)(router.settings)  # a router that has not seen the run
        shared, bytes_per_block = None, self.chosen.block_tokens * self.model.bytes_per_token
        if fleet.cpu_scope == "shared" and self.cpu_blocks:
            shared = self._cpu_tier(self.cpu_blocks * fleet.size)
            if not hasattr(shared, "cpu"):
                raise SettingError(
                    "argument --cpu-scope: vLLM 0.33's OffloadingConnector keeps one worker's CPU tier; a shared tier"
                    " is kvlab's write policies' (give --engine-version 0.24.0, or --cpu-scope private)"
                )
        decode = None
        if fleet.disaggregated:
            rest = replace(self.engine, output_tokens=None)  # each request's rest of its output, as it is sent
            decoders = [self.simulator(cost, True, settings=rest, cpu=False) for _ in range(fleet.decode_instances)]
            for simulator in decoders:
                simulator.remote = RemoteKV(bytes_per_block)
            decode = TimedFleet(decoders, ROUTERS["least-loaded"](), rest)
            first = replace(self.engine, output_tokens=1)  # a prefill instance computes the first token
            simulators = [self.simulator(cost, True, shared, first) for _ in range(fleet.size)]
        else:
            simulators = [self.simulator(cost, per_request, shared) for _ in range(fleet.size)]
        if shared is not None:
            hosts = SharedHosts(bytes_per_block)
            for index, simulator in enumerate(simulators):
                simulator.hosts, simulator.host = hosts, index
        timed_fleet = TimedFleet(simulators, router, self.engine, decode)
        timed = _metered(self.made, meter)
        if arrivals.kind == "clients":
            return timed_fleet, timed_fleet.run(timed, arrivals.clients)
        return timed_fleet, timed_fleet.run(arrivals.open_times(timed, getattr(self.made, "trace", None)))

    def simulator(self, cost, per_request, offload=None, settings=None, cpu=True):
        """The Python simulator of this instance (:class:`kvlab.simulator.events.Simulator`), priced by ``cost``,
        with the CPU tier ``offload`` (default: its own; none without ``cpu``) and the engine's ``settings`` (default:
        its own)."""
        from kvlab.simulator.events import Simulator
        from kvlab.simulator.pool import BlockPool

        tail_first = self.chosen.eviction_order == "tail-first"
        pool = BlockPool(self.usable, self.chosen.block_tokens)
        offload = offload if offload is not None else self._cpu_tier() if cpu else None
        engine = settings or self.engine
        return Simulator(pool, cost, offload, engine, per_request, tail_first=tail_first, rules=self.rules)

    def _cpu_tier(self, cpu_blocks=None):
        """Of ``cpu_blocks`` (default: the instance's), vLLM 0.33's OffloadingConnector (kvlab/simulator/offloading.py)
        for vLLM's engine and scheduler from 0.33,
        written through, LMCache's switches off; else the write policy's (kvlab/cache/write_policies.py); None
        without a CPU tier."""
        chosen, cpu_blocks = self.chosen, cpu_blocks or self.cpu_blocks
        if not cpu_blocks:
            return None
        if (
            self.rules.offloading_connector
            and self.engine.scheduler == "vllm"
            and self.model.settings.engine == "vllm"
            and chosen.write_policy == "write-through"
            and not chosen.touch_cpu_on_gpu_hit
            and not chosen.re_store_on_gpu_hit
        ):
            from kvlab.simulator.offloading import OffloadingConnector

            return OffloadingConnector(cpu_blocks)
        from kvlab.cache.write_policies import make_cache

        rules = {name: getattr(chosen, name) for name in CACHE_RULES if name not in ("write_policy", "gpu_eviction")}
        return make_cache(chosen.write_policy, 0, cpu_blocks * chosen.block_tokens, chosen.block_tokens, **rules)

    def describe(self):
        """The engine's version and rules, and the usable pool, for the run's JSON (vLLM's scheduler only)."""
        if self.engine.scheduler != "vllm":
            return {}, {}
        if self.rules_from == "--engine-version":
            version, rules = self.rules.version, self.rules_from
        else:
            version, rules = self.rules_from
        return {"version": version, "rules": rules}, {"gpu_blocks_usable": self.usable}


def _rules(model):
    """vLLM's rules (:func:`kvlab.serving.vllm.rules_for`) of ``--engine-version``, else of the database's version
    where it prices the run (rules and prices from one version), else the newest; and where they come from:
    ``--engine-version``, or (the version, why)."""
    from kvlab.serving.vllm import NEWEST, rules_for

    asked = model.settings.engine_version
    if asked is not None:
        return rules_for(asked), "--engine-version"
    database = model.database
    if database is not None and database.backend == "vllm":
        rules = rules_for(database.version)
        return rules, (database.version, f"vLLM {rules.version}'s, the version the database measured")
    return rules_for(NEWEST), (NEWEST, "the newest kvlab models (--engine-version for another)")


def _metered(workload, meter):
    """The workload's timed requests, checked against ``meter`` every 4,096 of them (and at the end)."""
    accesses = number = 0
    for number, request in enumerate(workload.timed(), 1):
        accesses += len(request.keys)
        if not number % 4096:
            meter.check(accesses, number, accesses, workload.read_fraction)
        yield request
    meter.check(accesses, number, accesses, workload.read_fraction)
