"""``kvlab.search``: the cheapest fleet that meets an SLO (what ``kvlab search`` prints; issue 40).

The space is every combination of the GPU systems, engines, TP degrees, layouts (``instances``, or ``P:D`` prefill
and decode instances), CPU budgets per GPU, CPU scopes and routers given. Each configuration costs its GPUs and their
host memory per hour (``--prices``, kvlab/latency/list_prices.py). The search does not simulate them all:

1. **Same run, or impossible.** A router or a CPU scope means nothing to one instance, nor a scope to no CPU tier:
   such twins are one configuration. A budget above the node's host memory per GPU is refused (the node cannot pin
   it), and so is a TP at which the engine's memory rule leaves no KV block (kvlab/serving/vllm.py). A CPU tier at
   least as large as every block the workload stores never evicts, so any larger budget runs the same and costs
   more: only the smallest such budget of the space is kept (the stored blocks as ``kvlab plan``'s ``StoredBlocks``
   counts them; a shared tier counts all its instances' rooms).
2. **Bounds**, from the engine's own step prices (kvlab/simulator/cost.py), before any simulation. A request's TTFT
   is at least its prefill alone on an idle engine, of the tokens no cache could hold (those it shares with no
   earlier request), in chunks of the step's budget; its TPOT at least a decode step of its own alone; its
   end-to-end time at least both. A percentile of lower bounds bounds the percentile. A TTFT target also needs
   instances (:meth:`Bounds.instances_needed`). A throughput is at most the offered load (every output token over
   the arrivals' span). A configuration a bound rules out is not simulated. The bounds assume what the step pricing
   gives: a step holding more costs no less, a prefill cut in more chunks no less (tests/test_search.py checks each
   bound against simulations).
3. **Cheapest first.** The rest are simulated in order of cost (``kvlab.simulate``); the first that meets every
   target is the winner. The frontier is the configurations that meet every target but the first, each better on
   the first than every cheaper one, up to ``frontier_reach`` times the winner's cost; past the winner a
   configuration is simulated only where its bound could still beat the best so far.

Every evaluation is kept by its settings (the workload's, the code's, the configuration's) in the user's cache
(kvlab/util/user_cache.py), or in ``evaluations`` (a folder): a second search simulates only what is new, and the
pipeline's ``search`` rule simulates each candidate in a job of its own (``--candidates``, ``--evaluate``) before the
answer reads them all.
"""

import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from kvlab.api.common import _frame, _guarded, _Result
from kvlab.util.errors import KvlabError, SettingError
from kvlab.util.files import dump_json, shown
from kvlab.util.settings import Declared, flag, listing, setting
from kvlab.workloads import whole_number

__all__ = ["SLO", "Search", "SearchSpace", "candidates", "evaluate", "search", "table"]

TIMES = ("ttft", "tpot", "e2e")
STATS = ("p50", "p90", "p99", "mean")
RATES = {"throughput": "output_tokens_per_s", "requests_per_s": "requests_per_s"}
ENGINE_OWN = ("gpu_blocks", "cpu_blocks", "scheduler")  # the engine's settings the search sets (its pool, its engine's)
HARDWARE_OWN = ("model_config", "gpu_system", "engine", "tp")  # the hardware's settings the search sets
MOST = 1024  # items of one list of the space
MAX_CONFIGURATIONS = 100_000  # a space past it is a typing slip (and its enumeration alone would take minutes)
TERM = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|<|>)\s*([0-9.eE+-]+)\s*([a-z/]*)\s*$")


@dataclass(frozen=True)
class Term:
    """One target: ``metric`` (``ttft_p99``, ``throughput`` ...), its comparison and its bound (ms for a time,
    per second for a rate)."""

    metric: str
    op: str
    bound: float

    @property
    def time(self):
        return self.metric.split("_")[0] in TIMES

    def value(self, figures):
        """The figure this term reads from a simulation's JSON (None where it has none)."""
        if self.time:
            name, stat = self.metric.split("_")
            return figures[f"{name}_ms"][stat]
        return figures[RATES[self.metric]]

    def met(self, value):
        if value is None:
            return False
        return {"<=": value <= self.bound, "<": value < self.bound, ">=": value >= self.bound, ">": value > self.bound}[
            self.op
        ]

    def text(self):
        return f"{self.metric}{self.op}{self.bound:g}{'ms' if self.time else '/s'}"


class SLO(tuple):
    """The targets of ``--slo`` (``ttft_p99<=2s,tpot_p99<=50ms,throughput>=1000``): TTFT, TPOT and end-to-end time at
    p50, p90, p99 or the mean, each at most (``<=`` or ``<``) a time in ms or s; the output tokens per second
    (``throughput``) or the requests per second at least (``>=`` or ``>``) a number. The first target's metric is the
    frontier's."""

    @classmethod
    def parse(cls, text):
        if isinstance(text, SLO):
            return text
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"expected targets such as 'ttft_p99<=2s,tpot_p99<=50ms', got {shown(text)}")
        terms = []
        for part in text.split(","):
            found = TERM.match(part)
            if found is None:
                raise ValueError(f"expected METRIC<=VALUE or METRIC>=VALUE, got {shown(part)}")
            metric, op, number, unit = found.groups()
            name, _, stat = metric.partition("_")
            time = name in TIMES and stat in STATS
            if not time and metric not in RATES:
                choices = [f"{n}_{s}" for n in TIMES for s in STATS] + list(RATES)
                raise ValueError(f"{shown(metric)} is not a metric (choose from {', '.join(choices)})")
            try:
                bound = float(number)
            except ValueError:
                raise ValueError(f"{metric}: {shown(number)} is not a number") from None
            if not (math.isfinite(bound) and bound >= 0):
                raise ValueError(f"{metric}: expected a number >= 0, got {shown(number)}")
            if time:
                if op[0] != "<":
                    raise ValueError(f"{metric}: a time is a ceiling (<= or <), got {op}")
                if unit not in ("ms", "s"):
                    raise ValueError(f"{metric}: give the time's unit, ms or s, got {shown(number + unit)}")
                bound = bound * 1000 if unit == "s" else bound
                if not math.isfinite(bound):
                    raise ValueError(f"{metric}: expected a time below 1e300 s, got {shown(number + unit)}")
            else:
                if op[0] != ">":
                    raise ValueError(f"{metric}: a rate is a floor (>= or >), got {op}")
                if unit not in ("", "/s"):
                    raise ValueError(f"{metric}: a rate is per second, got unit {shown(unit)}")
            if any(term.metric == metric for term in terms):
                raise ValueError(f"{metric} is given twice")
            terms.append(Term(metric, op, bound + 0.0))  # -0 is 0
        return cls(terms)

    def text(self):
        return ",".join(term.text() for term in self)


SLO.parse.__func__.takes_objects = True


def _choice(choices, what):
    def convert(value):
        if value not in choices:
            raise ValueError(f"{shown(value)}: no such {what} (choose from {', '.join(choices)})")
        return value

    return convert


def _layout(value):
    """``"P:D"`` -> ``(P, D)``: prefill and decode instances."""
    from kvlab.fleet import MAX_INSTANCES

    if isinstance(value, tuple) and len(value) == 2:  # already read
        value = f"{value[0]}:{value[1]}"
    parts = [part.strip() for part in str(value).split(":")]
    if len(parts) != 2:
        raise ValueError(f"expected PREFILL:DECODE instances such as 2:1, got {shown(value)}")
    number = whole_number(1, MAX_INSTANCES)
    return number(parts[0]), number(parts[1])


def _gib(value):
    from kvlab.sizing.model_size import decimal_gib

    return decimal_gib(value if isinstance(value, str) else str(value))


def _reach(value):
    if isinstance(value, bool):
        raise ValueError(f"expected a factor from 1 to 1000, got {shown(value)}")
    number = float(value)
    if not (math.isfinite(number) and 1 <= number <= 1000):
        raise ValueError(f"expected a factor from 1 to 1000, got {shown(value)}")
    return number


def _name(value):
    """A file's or a folder's name: text (or a path), not empty."""
    import os

    value = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a name, got {shown(value)}")
    return value


def _systems(value):
    from kvlab.latency.systems import system_names

    return listing(_choice(tuple(system_names()), "GPU system"), "GPU systems", MOST)(value)


def _engines(value):
    from kvlab.serving import OFFLOADING

    return listing(_choice(OFFLOADING, "engine"), "engines", MOST)(value)


def _routers(value):
    from kvlab.fleet.routers import ROUTERS

    return listing(_choice(tuple(ROUTERS), "router"), "routers", MOST)(value)


def _scopes(value):
    from kvlab.fleet import CPU_SCOPES

    return listing(_choice(CPU_SCOPES, "CPU scope"), "CPU scopes", MOST)(value)


for _convert in (_systems, _engines, _routers, _scopes, _name):
    _convert.takes_objects = True


@dataclass(frozen=True, kw_only=True)
class SearchSpace(Declared):
    """What ``kvlab search`` searches over and for (its flags, ``kvlab.search``'s keywords), declared once."""

    slo: SLO = setting(
        help="the targets, comma-separated: ttft_p99<=2s, tpot_p90<=50ms, e2e_p50<=10s (p50, p90, p99 or mean; ms or"
        " s), throughput>=N (output tokens/s), requests_per_s>=N; the first is the frontier's metric",
        convert=SLO.parse,
        metavar="TARGETS",
    )
    gpu_system: tuple = setting(
        help="the GPU systems allowed, comma-separated (kvlab/latency/systems.py)", convert=_systems, metavar="SYSTEMS"
    )
    engine: tuple = setting(("vllm",), help="the engines, comma-separated (default vllm)", convert=_engines)
    tp: tuple = setting(
        (1,),
        help="tensor-parallel degrees, comma-separated (default 1)",
        convert=listing(whole_number(1, 64), "TPs", MOST),
    )
    instances: tuple | None = setting(
        None,
        help="instances of the engine, comma-separated (default 1; none where --prefill-decode is given alone)",
        convert=listing(whole_number(1, 1024), "instance counts", MOST),
    )
    prefill_decode: tuple | None = setting(
        None,
        help="also prefill apart from decode: P:D instances, comma-separated (2:1,4:2); the decode instances have no"
        " CPU tier",
        convert=listing(_layout, "layouts", MOST),
        metavar="P:D",
    )
    cpu_gib: tuple = setting(
        (Decimal(0),),
        help="CPU budgets per GPU in GiB (2**30 bytes), comma-separated (default 0)",
        convert=listing(_gib, "GiB amounts", MOST),
        metavar="GIB",
    )
    cpu_scope: tuple = setting(
        ("private",), help="each instance's own CPU tier or one shared (default private)", convert=_scopes
    )
    router: tuple = setting(("round-robin",), help="routers, comma-separated (default round-robin)", convert=_routers)
    prices: str = setting(
        "default",
        help="a prices file (kvlab/latency/list_prices.yaml's shape), or default (kvlab's public list prices)",
        convert=_name,
        metavar="FILE",
    )
    frontier_reach: float = setting(
        1.0,
        help="how far the frontier reaches past the winner, a factor of its cost per hour (default %(default)s)",
        convert=_reach,
        metavar="FACTOR",
    )
    evaluations: str | None = setting(
        None,
        help="the folder that keeps each simulation (default: the user's cache folder, kvlab/util/user_cache.py)",
        convert=_name,
        metavar="DIR",
    )

    def check(self):
        for name in ("slo", "gpu_system", "engine", "tp", "cpu_gib", "cpu_scope", "router", "prices", "frontier_reach"):
            if getattr(self, name) is None:
                raise SettingError(f"argument {flag(name)}: expected a value, got None")


@dataclass(frozen=True)
class Configuration:
    """One point of the space: where it runs and how its cache is set; ``layout`` is ``(instances,)`` or ``(P, D)``."""

    gpu_system: str
    engine: str
    tp: int
    layout: tuple
    cpu_gib: Decimal
    cpu_scope: str
    router: str

    @property
    def split(self):
        return len(self.layout) == 2

    @property
    def instances(self):
        return sum(self.layout)

    @property
    def gpus(self):
        return self.instances * self.tp

    @property
    def cpu_gpus(self):
        """The GPUs whose instances have a CPU tier (a split's prefill instances)."""
        return self.layout[0] * self.tp

    def describe(self):
        layout = (
            {"prefill_instances": self.layout[0], "decode_instances": self.layout[1]}
            if self.split
            else {"instances": self.layout[0]}
        )
        return {
            "gpu_system": self.gpu_system,
            "engine": self.engine,
            "tp": self.tp,
            **layout,
            "gpus": self.gpus,
            "cpu_gib": float(self.cpu_gib),
            "cpu_scope": self.cpu_scope,
            "router": self.router,
        }

    def label(self):
        layout = f"{self.layout[0]}P+{self.layout[1]}D" if self.split else f"{self.layout[0]}x"
        return (
            f"{self.gpu_system} {self.engine} {layout} tp{self.tp} cpu {float(self.cpu_gib):g} GiB"
            f" {self.cpu_scope} {self.router}"
        )


@dataclass(frozen=True)
class Search(_Result):
    """What ``kvlab search`` prints: the winner (None where nothing meets the SLO), the frontier, the verdict."""

    winner: dict | None
    frontier: tuple
    verdict: dict
    text: str = field(repr=False)
    simulated: int = field(default=0, compare=False)  # this call's simulations (the rest read from evaluations)
    kept: int = field(default=0, compare=False)

    @classmethod
    def of(cls, text, simulated=0, kept=0):
        document = json.loads(text)
        return cls(document["winner"], tuple(document["frontier"]), document["verdict"], text, simulated, kept)

    def to_frame(self):
        """One row per configuration of the frontier: its settings, its cost per hour, its figures."""
        document = self.to_dict()
        return _frame(
            [
                {**row["configuration"], **{k: v for k, v in row.items() if k != "configuration"}}
                for row in document["frontier"]
            ]
        )


# --- what the search reads once --------------------------------------------------------------------------------


@functools.cache
def _code_digest():
    """A digest of kvlab's source: an evaluation kept by another version of the code is not found."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class Requests:
    """The workload's requests as the bounds need them: each one's input tokens, the tokens it shares with an earlier
    request (at most all but one: the engine computes a prompt's last token), its output, and the arrivals' span; and
    the room that holds every block it stores."""

    def __init__(self, made, arrivals, output_tokens):
        import numpy as np

        from kvlab.cache.interface import CacheSettings
        from kvlab.loop import ROW, replay, rows_of
        from kvlab.sizing.plan import StoredBlocks

        stored = StoredBlocks(made.block_tokens, False)
        replay(made, stored)
        self.room = stored.room  # tokens: a tier this large never evicts
        cache = CacheSettings(
            gpu_tokens=max(self.room, made.block_tokens), cpu_tokens=0, block_tokens=made.block_tokens
        )
        parts = []
        replay(made, cache.build(made), parts)
        rows = np.array([row[3:5] for row in rows_of(parts, ROW)], dtype=np.int64).reshape(-1, 2)
        self.tokens = rows[:, 0]
        self.shared = np.minimum(rows[:, 1], np.maximum(rows[:, 0] - 1, 0))
        timed = list(made.timed())
        self.outputs = np.array([output_tokens or request.output_tokens or 1 for request in timed], dtype=np.int64)
        if arrivals.kind == "clients":
            self.span = self.times = None
        else:
            self.times = np.array([when for when, _ in arrivals.open_times(timed, getattr(made, "trace", None))])
            self.span = float(self.times.max() - self.times.min()) if len(self.times) else 0.0


class Bounds:
    """The lower bounds of a configuration's times, per request, from its engine's step pricing (the module's
    docstring, item 2): computed once per GPU system, engine and TP."""

    def __init__(self, requests, cost, budget, chunked):
        import numpy as np

        ttft, tpot = [], []
        for tokens, shared in zip(requests.tokens.tolist(), requests.shared.tolist(), strict=True):
            step = budget if chunked else max(tokens - shared, 1)
            time, start = 0.0, shared
            while start < tokens:
                end = min(start + step, tokens)
                time += cost.prefill_ms(end, start)
                start = end
            ttft.append(time)
            tpot.append(cost.decode_ms(1, tokens))
        self.ttft = np.array(ttft)
        self.tpot = np.array(tpot)
        self.e2e = self.ttft + (requests.outputs - 1) * self.tpot
        self.times = requests.times  # arrival times in order (None: a closed loop)
        self.needed = {}  # term -> instances_needed's answer
        offered = int(requests.outputs.sum())
        self.throughput = offered / requests.span if requests.span else math.inf
        self.requests_per_s = len(requests.tokens) / requests.span if requests.span else math.inf

    def instances_needed(self, term):
        """The fewest instances that compute prefills could meet TTFT ``term`` with under the arrivals (0 where the
        arrivals are a closed loop or the term is not a TTFT percentile). A request meets a TTFT of X only if its
        prefill is done within X of its arrival, and an instance computes at most a second of prefill per second (a
        step costs the sum of its chunks' prices): so the prefill of the requests that arrive in a window [s, t] and
        meet X takes at most N (t + X - s) on N instances. All but k requests must meet X for the percentile to (k:
        numpy's linear percentile), and leaving out the k largest prefills of the whole workload leaves no more
        work than leaving out any k of the window's; windows start at up to 512 arrivals spread over the trace."""
        if term not in self.needed:
            self.needed[term] = self._needed(term)
        return self.needed[term]

    def _needed(self, term):
        import numpy as np

        if self.times is None or not term.metric.startswith("ttft_") or term.metric.endswith("mean"):
            return 0.0
        stat = term.metric.split("_")[1]
        if not len(self.ttft):
            return 0.0
        count = len(self.ttft)
        allowed = allowed_misses(count, stat)
        spared = float(np.sort(self.ttft)[count - allowed :].sum()) if allowed else 0.0
        work = np.concatenate(([0.0], np.cumsum(self.ttft)))  # ms
        times = self.times * 1000  # ms
        needed = 0.0
        for start in np.unique(np.linspace(0, count - 1, min(count, 512)).astype(np.int64)):
            window = work[start + 1 :] - work[start] - spared
            room = times[start:] - times[start] + max(term.bound, 1e-9)  # ms of prefill one instance can give
            needed = max(needed, float((window / room).max()))
        return needed

    def of(self, term):
        """The bound of ``term``'s metric: a floor of a time (ms), a ceiling of a rate."""
        import numpy as np

        if not term.time:
            return self.throughput if term.metric == "throughput" else self.requests_per_s
        name, stat = term.metric.split("_")
        values = getattr(self, name)
        if not len(values):
            return 0.0
        return float(values.mean() if stat == "mean" else np.percentile(values, float(stat[1:])))


# --- the search ------------------------------------------------------------------------------------------------


def search(*, workload, model_config, slo, gpu_system, max_memory=None, simulate=True, dry_run=False, **settings):
    """The cheapest configuration of the space that meets the SLO, the frontier of cost against the SLO's first
    metric, and whether offloading helps (the module's docstring): a :class:`Search`. ``settings``: the space's
    (:class:`SearchSpace`' fields), the arrivals' (``speedup``, ``rate``, ``clients``, ``seed``), the engine's
    (:class:`kvlab.simulator.settings.EngineSettings`' but :data:`ENGINE_OWN`) and the hardware's but
    :data:`HARDWARE_OWN`; the workload's options are keywords too. Without ``simulate``, every evaluation is read
    from ``evaluations`` (the pipeline's fan-out: :func:`candidates`, :func:`evaluate`); one it lacks is an error.
    With ``dry_run``, None once every setting is checked as the search checks it, nothing simulated (what ``kvlab
    config`` asks of a job)."""
    for name, value in (("simulate", simulate), ("dry_run", dry_run)):
        if not isinstance(value, bool):
            raise SettingError(f"{name}: expected True or False, got {shown(value)}")
    given = {**settings, "slo": slo, "gpu_system": gpu_system}

    def answer():
        searcher = _Searcher(workload, model_config, max_memory, given)
        if dry_run:
            return None
        return Search.of(searcher.run(simulate), searcher.simulated, searcher.kept)

    return _guarded(answer, {})


def candidates(*, workload, model_config, max_memory=None, **settings):
    """The configurations a search would evaluate (those its bounds leave), cheapest first: each ``ID LABEL``, the
    ID naming its evaluation in ``evaluations``."""

    def listed():
        searcher = _Searcher(workload, model_config, max_memory, settings)
        left, _ = searcher.candidates()
        return [f"{searcher.entry(config).stem} {config.label()}" for config in left]

    return _guarded(listed, {})


def evaluate(identifier, *, workload, model_config, max_memory=None, **settings):
    """Simulate the candidate ``identifier`` (:func:`candidates`' first word) into ``evaluations``."""

    def simulated():
        searcher = _Searcher(workload, model_config, max_memory, settings)
        left, _ = searcher.candidates()
        found = [config for config in left if searcher.entry(config).stem == identifier]
        if not found:
            raise SettingError(f"argument --evaluate: {shown(identifier)} is none of this search's candidates")
        searcher.evaluate(found[0])

    return _guarded(simulated, {})


class _Searcher:
    """One search: its settings checked before any work, then the walk."""

    def __init__(self, workload, model_config, max_memory, settings):
        from dataclasses import fields

        from kvlab.api.common import _hardware_values, _setting, workload_of
        from kvlab.latency.hardware import HardwareSettings
        from kvlab.latency.list_prices import load_prices
        from kvlab.simulator.arrivals import Arrivals
        from kvlab.simulator.settings import EngineSettings
        from kvlab.sizing.model_size import read_model_config
        from kvlab.util.memory import memory_size

        space = {found.name: settings.pop(found.name) for found in fields(SearchSpace) if found.name in settings}
        self.space = SearchSpace(**space)
        arrivals = {found.name: settings.pop(found.name) for found in fields(Arrivals) if found.name in settings}
        self.arrivals = Arrivals(**arrivals)
        engine = {}
        for found in fields(EngineSettings):
            if found.name in settings:
                if found.name in ENGINE_OWN:
                    raise SettingError(f"argument {flag(found.name)}: the search sets it")
                engine[found.name] = settings.pop(found.name)
        self.engine = EngineSettings(**engine)
        hardware = {
            found.name: settings.pop(found.name) for found in fields(HardwareSettings) if found.name in settings
        }
        for name in HARDWARE_OWN:
            if name in hardware:
                raise SettingError(f"argument {flag(name)}: the search sets it")
        self.hardware = {k: v for k, v in _hardware_values(hardware).items() if v is not None}
        self.options = {k: v for k, v in settings.items() if v is not None}
        if self.options.get("trace") == "-":
            raise SettingError("argument --trace: a search reads the trace once per simulation: give a file, not -")
        if self.arrivals.kind == "clients" and self.space.prefill_decode:
            raise SettingError(
                "argument --clients: prefill apart from decode takes open arrivals (--speedup or --rate)"
            )
        try:
            model_config = _name(model_config)
        except ValueError as error:
            raise SettingError(f"argument --model-config: {error}") from None
        _setting("max_memory", memory_size, max_memory)  # checked before any work, as each simulation checks it
        self.workload, self.model_config, self.max_memory = workload, model_config, max_memory
        self.made = workload_of(workload, dict(self.options), None, "search")
        self.shape = read_model_config(model_config)
        self.prices = load_prices(self.space.prices)
        for system in self.space.gpu_system:
            self.prices.system(system)  # a system the prices lack: refused before any work
        self.identity = self._identity()
        self.folder = Path(self.space.evaluations) if self.space.evaluations else None
        self.simulated = self.kept = 0
        self.memo = {}  # configuration -> its figures, this search's
        self.bounded = {}  # (system, engine, tp) -> its Bounds

    def _identity(self):
        """What every evaluation derives from besides its configuration: the workload, the model, the load, the
        engine's and the hardware's settings, the code."""
        made = self.made
        trace = self.options.get("trace")
        described = {
            "workload": made.describe(),
            "trace": _file_digest(trace) if trace else None,
            "model": _file_digest(self.model_config) if Path(self.model_config).is_file() else self.model_config,
            "arrivals": self.arrivals.describe(),
            "engine": self.engine.describe(),
            "hardware": {k: str(v) for k, v in sorted(self.hardware.items())},
            "options": {k: str(v) for k, v in sorted(self.options.items())},
        }
        return json.dumps(described, sort_keys=True, default=str) + _code_digest()

    # the space --------------------------------------------------------------------------------------------------

    def configurations(self):
        """Every configuration of the space once (twins merged), with what became of the others: ``(kept,
        counts)``."""
        from itertools import product

        space = self.space
        alone = space.instances or (() if space.prefill_decode else (1,))
        layouts = [(n,) for n in alone] + [tuple(pd) for pd in space.prefill_decode or ()]
        total = math.prod(map(len, (space.gpu_system, space.engine, space.tp, space.cpu_gib, space.cpu_scope)))
        total *= len(layouts) * len(space.router)
        if total > MAX_CONFIGURATIONS:
            raise SettingError(f"the space has {total:,} configurations, more than {MAX_CONFIGURATIONS:,}: narrow it")
        seen, kept = set(), []
        for system, engine, tp, layout, gib, scope, router in product(
            space.gpu_system, space.engine, space.tp, layouts, space.cpu_gib, space.cpu_scope, space.router
        ):
            one = layout == (1,)
            scope = "private" if one or not gib else scope
            router = "round-robin" if one else router
            config = Configuration(system, engine, tp, layout, gib, scope, router)
            if config not in seen:
                seen.add(config)
                kept.append(config)
        return kept, {"configurations": total, "twins": total - len(kept)}

    def cost(self, config):
        gpus = self.prices.per_hour(config.gpu_system, config.gpus - config.cpu_gpus, 0)["total"]
        return round(gpus + self.prices.per_hour(config.gpu_system, config.cpu_gpus, config.cpu_gib)["total"], 4)

    def cpu_tokens(self, config):
        from kvlab.sizing.model_size import tokens_in

        return tokens_in(config.cpu_gib, self.shape.bytes_per_token(config.tp, self.hardware.get("kv_dtype", "auto")))

    @functools.cached_property
    def requests(self):
        return Requests(self.made, self.arrivals, self.engine.output_tokens)

    def bounds(self, system, engine, tp):
        """The :class:`Bounds` of a GPU system, engine and TP, once; None where the weights leave no KV room."""
        key = system, engine, tp
        if key not in self.bounded:
            self.bounded[key] = self._bounds(system, engine, tp)
        return self.bounded[key]

    def _bounds(self, system, engine, tp):
        from kvlab.latency.hardware import HardwareModel, HardwareSettings
        from kvlab.serving.vllm import gpu_pool
        from kvlab.simulator.cost import StepCost

        try:  # the model's heads may not split over this TP
            self.shape.bytes_per_token(tp, self.hardware.get("kv_dtype", "auto"))
        except ValueError:
            return None
        settings = HardwareSettings(
            model_config=self.model_config, gpu_system=system, engine=engine, tp=tp, **self.hardware
        )
        model = HardwareModel(settings, self.made.block_tokens)
        engine = self.engine
        try:  # the engine's memory rule (kvlab simulate's): the weights may leave no room at this TP
            gpu_pool(model, self.made.block_tokens, engine.gpu_memory_utilization, engine.max_num_batched_tokens)
        except SettingError as error:
            if "no KV block fits" not in str(error):
                raise
            return None
        cost = StepCost(model, self.made.block_tokens)
        return Bounds(self.requests, cost, engine.max_num_batched_tokens, engine.chunked_prefill)

    def candidates(self):
        """The configurations left to simulate, cheapest first, and the counts of the others by why they were left."""
        configs, counts = self.configurations()
        if not len(self.requests.tokens):
            raise KvlabError("the workload has no requests: nothing to search with")
        node = {}
        for system in self.space.gpu_system:
            shape = self.prices.system(system).node
            node[system] = shape.host_memory_gib / shape.gpus
        counts |= {"host_memory": 0, "no_room": 0, "never_evicts": 0, "bounds": 0, "load_bounds": 0}
        usable = []
        for config in configs:
            if float(config.cpu_gib) > node[config.gpu_system]:
                counts["host_memory"] += 1
            elif self.bounds(config.gpu_system, config.engine, config.tp) is None:
                counts["no_room"] += 1
            else:
                usable.append(config)
        room = self.requests.room
        fills = {}  # (system, engine, tp, layout, scope, router) -> the smallest budget that never evicts
        for config in sorted(usable, key=lambda c: c.cpu_gib):
            tokens = self.cpu_tokens(config) * (config.layout[0] if config.cpu_scope == "shared" else 1)
            if tokens >= room:
                fills.setdefault(
                    (config.gpu_system, config.engine, config.tp, config.layout, config.cpu_scope, config.router),
                    config.cpu_gib,
                )
        left = []
        for config in usable:
            smallest = fills.get(
                (config.gpu_system, config.engine, config.tp, config.layout, config.cpu_scope, config.router)
            )
            if smallest is not None and config.cpu_gib > smallest:
                counts["never_evicts"] += 1
                continue
            bounds = self.bounds(config.gpu_system, config.engine, config.tp)
            if not all(_reachable(term, bounds.of(term)) for term in self.space.slo):
                counts["bounds"] += 1
                continue
            if any(config.layout[0] < bounds.instances_needed(term) for term in self.space.slo):
                counts["load_bounds"] += 1
                continue
            left.append(config)
        left.sort(key=lambda c: (self.cost(c), c.label()))
        return left, counts

    # one evaluation ---------------------------------------------------------------------------------------------

    def settings_of(self, config):
        """``kvlab.simulate``'s keywords for ``config``."""
        from kvlab.serving import ENGINES

        layout = (
            {"prefill_instances": config.layout[0], "decode_instances": config.layout[1]}
            if config.split
            else {"instances": config.layout[0]}
        )
        given = {k: v for k, v in self.engine.describe().items() if k not in ("gpu_blocks", "cpu_blocks")}
        return {
            **given,
            "scheduler": ENGINES[config.engine].scheduler,
            "cpu_tokens": self.cpu_tokens(config),
            **layout,
            "router": config.router,
            "cpu_scope": config.cpu_scope,
            "gpu_system": config.gpu_system,
            "engine": config.engine,
            "tp": config.tp,
            **self.hardware,
        }

    def entry(self, config):
        from kvlab.util import user_cache

        key = json.dumps(config.describe(), sort_keys=True)
        if self.folder is None:
            return user_cache.entry("search", ".json", self.identity, key)
        digest = hashlib.sha256(f"{self.identity}|{key}".encode()).hexdigest()[:32]
        return self.folder / f"{digest}.json"

    def evaluate(self, config, simulate=True):
        """The figures of ``config``'s simulation (kept by its settings), or ``{"error": line}`` where the engine
        cannot serve it; None where it is not kept and ``simulate`` is off."""
        from kvlab.util import user_cache

        if config in self.memo:
            return self.memo[config]
        path = self.entry(config)
        found = user_cache.read(path)
        figures = _sound(found)
        if found is not None and figures is None and not simulate:
            raise KvlabError(
                f"{path}: not an evaluation kvlab search wrote: remove it and simulate it again (kvlab search"
                f" --evaluate {path.stem})"
            )
        if figures is not None:
            self.kept += 1
        else:  # not kept, or damaged: simulated (again)
            if not simulate:
                return None
            figures = self._simulate(config)
            self.simulated += 1
            if self.folder is not None:
                try:
                    self.folder.mkdir(parents=True, exist_ok=True)
                except OSError as error:
                    raise KvlabError(f"--evaluations {self.folder}: cannot write there ({error.strerror})") from None
            user_cache.keep(path, dump_json(figures).encode())
        self.memo[config] = figures
        return figures

    def _evaluated(self, config, simulate):
        figures = self.evaluate(config, simulate)
        if figures is None:
            raise KvlabError(
                f"{config.label()}: not simulated yet: kvlab search --evaluate {self.entry(config).stem} (into"
                f" {self.folder or 'the user cache'})"
            )
        return figures

    def arrival_keywords(self):
        from dataclasses import fields

        return {
            found.name: getattr(self.arrivals, found.name)
            for found in fields(self.arrivals)
            if getattr(self.arrivals, found.name) is not None
        }

    def _run(self, config):
        """``kvlab.simulate`` of ``config``; ``{"error": line}`` where the engine cannot serve it."""
        from kvlab.api.simulates import simulate

        try:
            return simulate(
                workload=self.workload,
                **self.options,
                model_config=self.model_config,
                max_memory=self.max_memory,
                **self.arrival_keywords(),
                **self.settings_of(config),
            )
        except KvlabError as error:  # every request longer than this configuration's pool: it serves none
            if "GPU pool" not in str(error) or isinstance(error, SettingError):
                raise
            return {"error": str(error)}

    def _simulate(self, config):
        result = self._run(config)
        if isinstance(result, dict):
            return result
        document = result.to_dict()
        names = ("requests", "refused", "ttft_ms", "tpot_ms", "e2e_ms", "requests_per_s", "output_tokens_per_s")
        return {
            "gpu_tokens": document["cache"]["gpu_tokens"],
            "cpu_tokens": document["cache"]["cpu_tokens"],
            **{name: document[name] for name in names},
            "token_hit_ratio": document["token_hit_ratio"],
            "preemptions": document["preemptions"],
        }

    # the walk ---------------------------------------------------------------------------------------------------

    def walk(self, left, simulate=True):
        """The winner and the frontier from ``left`` (cheapest first): each simulated in turn (or read, without
        ``simulate``: KvlabError for one not kept), as the module's docstring says."""
        slo, reach = self.space.slo, self.space.frontier_reach
        first = slo[0]
        sign = 1 if first.time else -1  # the frontier's metric, smaller is better
        winner, best, rows = None, math.inf, []
        counts = {"past_the_frontier": 0, "dominated": 0}
        for config in left:
            cost = self.cost(config)
            if winner is not None and cost > reach * winner["cost_per_hour"]:
                counts["past_the_frontier"] += 1
                continue
            bound = self.bounds(config.gpu_system, config.engine, config.tp).of(first) * sign
            if winner is not None and bound >= best:
                counts["dominated"] += 1
                continue
            figures = self._evaluated(config, simulate)
            full = "error" not in figures
            values = {term.metric: term.value(figures) if full else None for term in slo}
            meets = all(term.met(values[term.metric]) for term in slo)
            row = {
                "configuration": config.describe(),
                "cost_per_hour": cost,
                **values,
                "meets_slo": meets,
                "figures": figures,
            }
            value = values[first.metric]
            others = all(term.met(values[term.metric]) for term in slo[1:])  # the frontier trades the first alone
            if value is not None and others and value * sign < best:
                best = value * sign
                rows = [kept for kept in rows if kept["cost_per_hour"] < cost]  # same cost, better: it replaces
                rows.append(row)
            if meets and winner is None:
                winner = row
        return winner, rows, counts

    def baseline(self, left, winner, simulate=True):
        """The cheapest configuration with no CPU tier that meets the SLO (the verdict's comparison), simulated where
        the walk did not; None where none does."""
        if winner is None:
            return None
        for config in left:
            if config.cpu_gib:
                continue
            figures = self._evaluated(config, simulate)
            if "ttft_ms" in figures and all(term.met(term.value(figures)) for term in self.space.slo):
                return {"configuration": config.describe(), "cost_per_hour": self.cost(config), "figures": figures}
        return None

    def run(self, simulate=True):
        left, counts = self.candidates()
        winner, frontier, walked = self.walk(left, simulate)
        counts |= walked
        baseline = self.baseline(left, winner, simulate)
        if winner is not None:
            winner = {**winner, **self.plan(winner)}
        document = {
            "workload": self.made.describe(),
            "model": Path(self.model_config).parent.name or self.model_config,
            "arrivals": self.arrivals.describe(),
            "slo": self.space.slo.text(),
            "prices": {"prices": self.prices.name, "currency": self.prices.currency},
            "space": self.space_described(),
            "search": {**counts, "candidates": len(left), "evaluated": len(self.memo)},
            "bounds": "lone prefill of the tokens no cache holds, a lone decode step, the offered load"
            " (kvlab/api/searches.py)",
            "winner": winner,
            "frontier": frontier,
            "verdict": self.verdict(winner, baseline),
        }
        return dump_json(document)

    def space_described(self):
        space = self.space
        return {
            "gpu_system": list(space.gpu_system),
            "engine": list(space.engine),
            "tp": list(space.tp),
            "instances": list(space.instances or (() if space.prefill_decode else (1,))),
            "prefill_decode": [f"{p}:{d}" for p, d in space.prefill_decode or ()],
            "cpu_gib": [float(gib) for gib in space.cpu_gib],
            "cpu_scope": list(space.cpu_scope),
            "router": list(space.router),
            "frontier_reach": space.frontier_reach,
        }

    def plan(self, winner):
        """``kvlab plan`` of one of the winner's instances at its rooms, the whole workload through it: its engine's
        settings, and for one instance its tiers, hit ratios, predicted TTFT and cost. For a fleet the hit figures
        under load are the simulation's, and the router's settings are added (kvlab/fleet/routers/products.py)."""
        from kvlab.api.plans import plan
        from kvlab.sizing.plan import router_settings

        config = winner["configuration"]
        found = plan(
            workload=self.workload,
            **self.options,
            model_config=self.model_config,
            tp=config["tp"],
            gpu_tokens=winner["figures"]["gpu_tokens"],
            cpu_gib=config["cpu_gib"],
            engine=config["engine"],
            gpu_system=config["gpu_system"],
            prices=self.space.prices,
            **self.hardware,
        ).to_dict()
        if config.get("instances") == 1:
            return {"plan": found}
        said = {"engine": found["engine"], "router": router_settings(config["router"], config["engine"], None)}
        return {**said, "instance_verdict": found["verdict"]}

    def verdict(self, winner, baseline):
        """Does offloading help here: the hit side's reasons of the winner's plan, else the winner against the
        cheapest configuration without a CPU tier."""
        if winner is None:
            return {
                "offload_helps": None,
                "reason": "no_winner",
                "line": "nothing in the space meets the SLO: widen the space or loosen the targets",
            }
        said = winner["plan"]["verdict"] if "plan" in winner else winner.pop("instance_verdict")
        if said["reason"] in ("no_reuse", "fits_in_gpu"):
            return said
        config = winner["configuration"]
        currency = self.prices.currency
        if not config["cpu_gib"]:
            return {
                "offload_helps": False,
                "reason": "cheapest_without",
                "line": f"no: the cheapest configuration that meets the SLO has no CPU tier"
                f" ({winner['cost_per_hour']:g} {currency} per hour)",
            }
        if baseline is None:
            return {
                "offload_helps": True,
                "reason": "only_with",
                "line": f"yes: only with a CPU tier does the space meet the SLO ({winner['cost_per_hour']:g}"
                f" {currency} per hour, {config['cpu_gib']:g} GiB per GPU)",
            }
        saved = baseline["cost_per_hour"] - winner["cost_per_hour"]
        ratio = saved / baseline["cost_per_hour"] * 100 if baseline["cost_per_hour"] else 0.0
        first = self.space.slo[0]
        line = (
            f"yes: {config['cpu_gib']:g} GiB of CPU per GPU meets the SLO at {winner['cost_per_hour']:g} {currency} per"
            f" hour; without a CPU tier the cheapest that does costs {baseline['cost_per_hour']:g} ({ratio:.1f}%"
            f" saved); {first.metric} {winner[first.metric]} with the tier, {first.value(baseline['figures'])} without"
        )
        return {"offload_helps": True, "reason": "cheaper_with", "line": line}


FIGURES = {  # what an evaluation holds, and of which type (kvlab/api/searches.py _simulate)
    "gpu_tokens": int,
    "cpu_tokens": int,
    "requests": int,
    "refused": int,
    "ttft_ms": dict,
    "tpot_ms": dict,
    "e2e_ms": dict,
    "requests_per_s": float,
    "output_tokens_per_s": float,
    "token_hit_ratio": float,
    "preemptions": int,
}


def _sound(found):
    """A kept evaluation's figures, or None where there are none or they are not what :meth:`_Searcher._simulate`
    writes (a damaged or foreign file is simulated again, or named)."""
    if found is None:
        return None
    try:
        figures = json.loads(found)
    except ValueError:
        return None
    if not isinstance(figures, dict):
        return None
    if set(figures) == {"error"}:
        return figures if isinstance(figures["error"], str) else None

    def number(value, kind):
        if value is None:
            return kind is float
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return math.isfinite(value) and value >= 0 and (kind is float or isinstance(value, int))

    if set(figures) != set(FIGURES):
        return None
    for key, kind in FIGURES.items():
        value = figures[key]
        if kind is dict:
            if (
                not isinstance(value, dict)
                or set(value) != set(STATS)
                or not all(number(v, float) for v in value.values())
            ):
                return None
        elif not number(value, kind):
            return None
    return figures


def allowed_misses(count, stat):
    """How many of ``count`` requests may miss a target for its percentile ``stat`` (``p99``) to meet it: numpy's
    linear percentile is at most the value at ``floor(q (count - 1))`` in order."""
    return count - 1 - math.floor(float(stat[1:]) / 100 * (count - 1))


def _reachable(term, bound):
    """Whether ``term`` can still be met where its metric's bound (a floor of a time, a ceiling of a rate) is
    ``bound``."""
    if term.time:
        return bound <= term.bound if term.op == "<=" else bound < term.bound
    return bound >= term.bound if term.op == ">=" else bound > term.bound


def table(document):
    """A search for people: what was searched and how much of it ran, the frontier, the winner's plan, the
    verdict."""
    from kvlab.sizing.plan import engine_lines, router_lines
    from kvlab.sizing.plan import table as plan_table

    found, currency = document["search"], document["prices"]["currency"]
    first = document["slo"].split(",")[0]
    metric = re.match(r"[a-z0-9_]+", first).group(0)
    pruned = ", ".join(
        f"{value:,} {key.replace('_', ' ')}"
        for key, value in found.items()
        if key not in ("configurations", "candidates", "evaluated") and value
    )
    lines = [
        f"search: {found['configurations']:,} configurations; left aside: {pruned or 'none'}; {found['candidates']:,}"
        f" candidates, {found['evaluated']:,} evaluated (cheapest first)",
        f"SLO: {document['slo']}; prices: {document['prices']['prices']} ({currency} per hour)",
        "",
        f"frontier (cost per hour against {metric}; simulated in full):",
    ]
    for row in document["frontier"]:
        lines.append(
            f"  {row['cost_per_hour']:>10g}  {metric} {row[metric]!s:>9}  {'meets' if row['meets_slo'] else 'misses'}"
            f"  {label(row['configuration'])}"
        )
    winner = document["winner"]
    lines.append("")
    if winner is None:
        lines.append("winner: none")
    else:
        config = winner["configuration"]
        figures = winner["figures"]
        lines.append(
            f"winner: {label(config)}: {winner['cost_per_hour']:g} {currency} per hour, {config['gpus']} GPU(s);"
            f" TTFT p99 {figures['ttft_ms']['p99']} ms, TPOT p99 {figures['tpot_ms']['p99']} ms,"
            f" {figures['output_tokens_per_s']} output tokens/s, hit ratio {figures['token_hit_ratio']}"
        )
        if "plan" in winner:
            shown = plan_table(winner["plan"]).splitlines()[:-2]  # its verdict: the search's own, below
            lines += ["", "its plan:", *("  " + line if line else "" for line in shown)]
        else:
            lines += engine_lines(winner["engine"]) + router_lines(winner["router"])
    lines += ["", f"offloading helps? {document['verdict']['line']}"]
    return "\n".join(lines) + "\n"


def label(config):
    """A configuration's JSON for people."""
    split = "prefill_instances" in config
    layout = f"{config['prefill_instances']}P+{config['decode_instances']}D" if split else f"{config['instances']}x"
    return (
        f"{config['gpu_system']} {config['engine']} {layout} tp{config['tp']}, {config['cpu_gib']:g} GiB CPU per GPU"
        f" ({config['cpu_scope']}), {config['router']}"
    )
