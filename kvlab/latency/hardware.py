"""A request's TTFT from the hardware: prefill priced by the measured database (or a roofline), loads by the
link, composed as each engine serves a request whose prefix comes partly from the CPU tier.

:class:`HardwareSettings` is the one settings object: its fields are ``kvlab ttft predict``'s flags and
``kvlab.ttft_predict``'s keywords. :class:`HardwareModel` prices a request of ``tokens`` tokens whose first
``gpu_tokens`` are GPU hits and next ``cpu_tokens`` CPU hits (the tiers :func:`kvlab.loop.replay` reports):

each serving engine's way (``kvlab/serving/``: ``composition``, ``layer_by_layer``, ``blocking_store``): a load then
the prefill (``load + prefill``), the same with the store waited for (``load + prefill + store``: LMCache), or layer
by layer beside the compute (SGLang, LMCache's ``use_layerwise``): the longer of load and prefill, plus one layer of
the shorter and one layer of the store.

A GPU hit costs nothing to move; at least one token is computed (the last: a full hit recomputes it).
"""

import functools
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from kvlab.latency import roofline
from kvlab.latency.transfer import DISK_HARDWARE, DISK_MEDIA, Link
from kvlab.serving import ENGINES as SERVING
from kvlab.serving import OFFLOADING
from kvlab.sizing.model_size import kv_dtype_setting
from kvlab.util.errors import KvlabError, SettingError
from kvlab.util.files import number_in
from kvlab.util.settings import Declared, name_or_file, nonempty_text, setting
from kvlab.workloads import whole_number

__all__ = [
    "ALL_REDUCES",
    "DISK_HARDWARE",
    "LATENCY_SOURCES",
    "HardwareModel",
    "HardwareSettings",
]

LATENCY_SOURCES = ("auto", "database", "roofline")
ALL_REDUCES = ("ring", "none")  # none: no tensor-parallel communication, as Mooncake's Eq. 2 assumes


@dataclass(frozen=True, kw_only=True)
class HardwareSettings(Declared):
    """What prices time: the model, the system, the engine; the roofline's factors and the link's. Each field is
    declared once (kvlab/util/settings.py): a flag of ``kvlab ttft predict`` (``--gpu-system``, ...) and a keyword of
    the Python API."""

    model_config: str = setting(convert=name_or_file, help="the model's whole Hugging Face config.json")
    gpu_system: str = setting(
        convert=name_or_file,
        help="an aiconfigurator-core system (kvlab ttft systems: h100_sxm, ...) or a .yaml file of its fields",
    )
    engine: str = setting(
        "vllm", choices=OFFLOADING, help="the engine whose offload design prices a load (default %(default)s)"
    )
    engine_version: str | None = setting(
        None,
        convert=nonempty_text,
        help="the engine's version: the database's kernels and vLLM's scheduler rules (default: the database's"
        " current one; kvlab ttft systems lists them)",
    )
    tp: int = setting(1, convert=whole_number(1, 2**20), help="tensor-parallel degree (default %(default)s)")
    latency_source: str = setting(
        "auto",
        choices=LATENCY_SOURCES,
        help="database: aiconfigurator-core's measured kernels; roofline: config.json and the system's specs; auto"
        " (default): the database where it covers the model, else the roofline",
    )
    efficiency: float = setting(
        roofline.Efficiency.compute,
        convert=number_in(1e-9, 1, "a fraction from 1e-9 to 1"),
        help="the roofline's fraction of peak FLOP/s (default %(default)s)",
    )
    memory_efficiency: float = setting(
        roofline.Efficiency.memory,
        convert=number_in(1e-9, 1, "a fraction from 1e-9 to 1"),
        help="the roofline's fraction of HBM bandwidth (default %(default)s)",
    )
    overhead_ms: float = setting(
        0.0, convert=number_in(0, 1e9, "0 to 1e9 ms"), help="the roofline's fixed ms per step (default %(default)s)"
    )
    link_gbps: float | None = setting(
        None,
        convert=number_in(1e-9, 1e9, "a number from 1e-9 to 1e9"),
        help="the CPU->GPU link's peak in GB/s (default: the system's PCIe figure)",
    )
    copy_us: float | None = setting(
        None,
        convert=number_in(0, 1e9, "0 to 1e9 microseconds"),
        help="the link's cost per copy in microseconds (default: the engine's, kvlab/serving/)",
    )
    link_latency_ms: float = setting(
        0.0, convert=number_in(0, 1e9, "0 to 1e9 ms"), help="a fixed ms per load (default %(default)s)"
    )
    layerwise: bool = setting(
        False, switch="on", help="LMCache's use_layerwise: load layer by layer beside the compute (--engine lmcache)"
    )
    all_reduce: str = setting(
        "ring",
        choices=ALL_REDUCES,
        help="the roofline's tensor-parallel all-reduces: ring (default) or none (Mooncake's Eq. 2 assumes none)",
    )
    kv_dtype: str = kv_dtype_setting()
    disk_medium: str = setting(
        "nvme",
        choices=tuple(DISK_MEDIA),
        help="the disk tier's medium: nvme (default) or rdma (a remote store), its read figures"
        " (kvlab/latency/transfer.py DISK_MEDIA)",
    )
    disk_gbps: float | None = setting(
        None,
        convert=number_in(1e-9, 1e9, "a number from 1e-9 to 1e9"),
        help="the disk tier's read peak in GB/s (default: the medium's)",
    )
    disk_us: float | None = setting(
        None,
        convert=number_in(0, 1e9, "0 to 1e9 microseconds"),
        help="the disk tier's microseconds per block read (default: the medium's)",
    )

    def check(self):
        if self.layerwise and SERVING[self.engine].layerwise is None:
            raise SettingError("--layerwise is LMCache's use_layerwise: it applies to --engine lmcache only")

    def disk_flag(self):
        """The first disk-read setting given away from its default (``--disk-medium`` ...), or None: a setting that
        prices a disk tier's reads means nothing where there is no disk tier."""
        for name in DISK_HARDWARE:
            if getattr(self, name) != DISK_DEFAULTS[name]:
                return "--" + name.replace("_", "-")
        return None

    def roofline_flag(self):
        """The first of the roofline's factors (:data:`ROOFLINE_FACTORS`) given away from its default, or None: the
        database's kernels are measured, so a factor means nothing where it prices."""
        for name in ROOFLINE_FACTORS:
            if getattr(self, name) != DEFAULTS[name]:
                return "--" + name.replace("_", "-")
        return None

    def efficiencies(self):
        return roofline.Efficiency(self.efficiency, self.memory_efficiency, self.overhead_ms)

    def replace(self, **changes):
        return HardwareSettings(**{**asdict(self), **changes})


DEFAULTS = {setting.name: setting.default for setting in fields(HardwareSettings)}
DISK_DEFAULTS = {name: DEFAULTS[name] for name in DISK_HARDWARE}
ROOFLINE_FACTORS = ("efficiency", "memory_efficiency", "overhead_ms", "all_reduce")  # what prices the roofline only


def no_disk_pricing(settings, where):
    """SettingError when ``settings`` (:class:`HardwareSettings`) price a disk tier that ``where`` has none of."""
    flag = settings.disk_flag()
    if flag is not None:
        raise SettingError(f"argument {flag}: prices a disk tier's reads, which {where}")


def disk_link(settings):
    """The disk tier's read (:class:`kvlab.latency.transfer.Link`: peak, microseconds per block) of ``settings``."""
    peak, per_block = DISK_MEDIA[settings.disk_medium]
    return Link(
        settings.disk_gbps if settings.disk_gbps is not None else peak,
        settings.disk_us if settings.disk_us is not None else per_block,
    )


def settings_names():
    return tuple(setting.name for setting in fields(HardwareSettings))


class HardwareModel:
    """Prices requests in one setting (:class:`HardwareSettings`) and a cache's ``block_tokens``."""

    def __init__(self, settings, block_tokens=None):
        from kvlab.latency.shape import read_compute_shape
        from kvlab.latency.systems import read_system
        from kvlab.sizing.model_size import ModelConfigError, read_model_config

        self.settings = settings
        self.serving = SERVING[settings.engine]
        self.block_tokens = (
            block_tokens or self.serving.block_tokens
        )  # its block, chunk or page where no cache gives one
        self.system = read_system(settings.gpu_system)
        try:
            kv = read_model_config(settings.model_config)
        except ModelConfigError as error:
            raise SettingError(f"--model-config: {error}") from None
        try:  # the engines' split of the heads (kvlab/sizing/model_size.py KVShape.heads_per_gpu)
            kv.heads_per_gpu(settings.tp)
        except ValueError as error:
            raise SettingError(f"--tp: {error}") from None
        try:
            self.bytes_per_token = kv.bytes_per_token(settings.tp, settings.kv_dtype, windows=True)
        except ValueError as error:
            raise SettingError(f"--model-config: {error}") from None
        self.layers = kv.layers + kv.window_layers or 1
        self.database, why = self._database(settings)
        factor = settings.roofline_flag() if self.database is not None else None
        if factor is not None:
            raise SettingError(
                f"argument {factor}: a factor of the roofline, and the kernel database prices this setting (measured"
                " kernels): give --latency-source roofline to price with the roofline"
            )
        self.shape = None
        if self.database is None:
            try:
                self.shape = read_compute_shape(settings.model_config)
            except (ModelConfigError, ValueError) as error:
                raise SettingError(f"--model-config: {error}") from None
        self.why_roofline = why
        peak = settings.link_gbps if settings.link_gbps is not None else self.system.pcie_bw / 1e9
        copy = settings.copy_us if settings.copy_us is not None else self.serving.copy_us
        self.link = Link(peak, copy, settings.link_latency_ms)
        self.disk = disk_link(settings)
        self.prefill_ms = functools.lru_cache(maxsize=1 << 16)(self._prefill_ms)

    def with_settings(self, settings):
        """This model repriced in ``settings`` that differ in the roofline's and the link's factors only (the
        calibration's step), without reading its files again."""
        import copy

        model = copy.copy(self)
        model.settings = settings
        model.link = Link(
            settings.link_gbps if settings.link_gbps is not None else self.link.peak_gbps,
            settings.copy_us if settings.copy_us is not None else self.link.copy_us,
            settings.link_latency_ms,
        )
        model.disk = disk_link(settings)
        model.prefill_ms = functools.lru_cache(maxsize=1 << 16)(model._prefill_ms)
        return model

    def _database(self, settings):
        """The database where the setting asks for it and it covers the model; else None and why not."""
        if settings.latency_source == "roofline":
            return None, "asked for"
        if Path(settings.gpu_system).suffix in (".yaml", ".yml"):
            if settings.latency_source == "database":
                raise SettingError("--latency-source database: a system file of one's own has no measured kernels")
            return None, "a system file of one's own has no measured kernels"
        from kvlab.latency.database import Database

        try:
            model_dir = Path(settings.model_config).parent
            return Database(model_dir, settings.gpu_system, settings.engine, settings.engine_version, settings.tp), None
        except KvlabError as error:
            if settings.latency_source == "database" or settings.engine_version is not None:
                raise  # asked for the database, or for one of its versions
            return None, str(error)

    def weights_shape(self, rule):
        """The model's compute shape (its weights), which ``rule`` needs; SettingError where kvlab cannot read it."""
        from kvlab.latency.shape import HeadsOnly, read_compute_shape
        from kvlab.sizing.model_size import ModelConfigError

        try:
            return self.shape or read_compute_shape(self.settings.model_config)
        except HeadsOnly:
            raise SettingError(
                f"{self.settings.model_config}: {rule} needs the model's weights, which kvlab reads for attention"
                " models with heads only (not latent attention, a recurrent state or an indexer): give --gpu-blocks"
            ) from None
        except (ModelConfigError, ValueError) as error:
            raise SettingError(f"--model-config: {error}") from None

    @property
    def source(self):
        """``database`` or ``roofline``: what priced the prefills."""
        return "database" if self.database is not None else "roofline"

    def describe(self, disk=False):
        """What priced what, for every output: the prefill's source, the link, the engine's composition (and with
        ``disk``, the disk tier's reads)."""
        settings = self.settings
        if self.database is not None:
            prefill = self.database.source
        else:
            factors = settings.efficiencies()
            prefill = (
                f"roofline: {self.system.source}; efficiency compute {factors.compute} memory {factors.memory},"
                f" overhead {factors.overhead_ms} ms, all-reduce {settings.all_reduce}"
            )
            if settings.latency_source == "auto":
                prefill += f" (not the database: {self.why_roofline})"
        link = "--link-gbps" if settings.link_gbps is not None else f"PCIe of {self.system.source}"
        return {
            "latency_source": self.source,
            "prefill": prefill,
            "transfer": {
                **self.link.describe(),
                "peak_from": link,
                "copy_from": "--copy-us" if settings.copy_us is not None else self.serving.copy_source,
                "unit": self.serving.unit,
            },
            **({"disk": self.describe_disk()} if disk else {}),
            "composition": self.serving.layerwise if settings.layerwise else self.serving.composition,
            "model_config": Path(settings.model_config).as_posix(),
            "gpu_system": self.system.name,
            "engine": settings.engine,
            "tp": settings.tp,
            "kv_bytes_per_token": self.bytes_per_token,
        }

    def _prefill_ms(self, tokens, cached):
        cached = min(cached, tokens - 1)
        if self.database is not None:
            return self.database.prefill_ms(tokens, cached)
        settings = self.settings
        factors = settings.efficiencies()
        kv = {"tp": settings.tp, "reduce": settings.all_reduce, "kv_dtype": settings.kv_dtype}
        return roofline.prefill_ms(self.shape, self.system, factors, tokens, cached, **kv)

    def describe_disk(self):
        settings = self.settings
        given = [flag for flag in ("disk_gbps", "disk_us") if getattr(settings, flag) is not None]
        return {
            "medium": settings.disk_medium,
            "peak_gbps": self.disk.peak_gbps,
            "us_per_block": self.disk.copy_us,
            "from": ", ".join("--" + flag.replace("_", "-") for flag in given)
            or "kvlab/latency/transfer.py DISK_MEDIA",
            "composition": "read into host memory before the load to the GPU (LMCache StorageManager.batched_get;"
            " SGLang --hicache-storage-prefetch-policy wait_complete)",
        }

    def disk_ms(self, tokens):
        """Reading ``tokens`` tokens of KV from the disk tier into host memory, a block a read."""
        return self.disk.ms(tokens * self.bytes_per_token, self.block_tokens * self.bytes_per_token)

    def load_ms(self, tokens):
        """Moving ``tokens`` tokens of KV from the CPU tier to one GPU (every rank moves its share at once)."""
        size = tokens * self.bytes_per_token
        unit = self.serving.transfer_unit(self.block_tokens, tokens, self.bytes_per_token, self.layers)
        return self.link.ms(size, unit)

    @property
    def layer_by_layer(self):
        return self.serving.layer_by_layer or self.settings.layerwise

    def store_ms(self, tokens, gpu_tokens, cpu_tokens, has_cpu):
        """LMCache's blocking write-through of the computed tokens where the cache has a CPU tier; 0 for the
        engines that store off the TTFT."""
        computed = tokens - gpu_tokens - cpu_tokens
        return self.load_ms(computed) if has_cpu and computed > 0 and self.serving.blocking_store else 0.0

    def parts_ms(self, tokens, gpu_tokens, cpu_tokens, has_cpu=False, disk_tokens=0):
        """``(load, prefill, ttft)`` of one request, in ms (the TTFT with the store of :meth:`store_ms`). Tokens from
        a disk tier are read into host memory first (:meth:`disk_ms`, in ``load``), then loaded as the CPU's are."""
        if tokens <= 0:
            return 0.0, 0.0, 0.0
        loaded = cpu_tokens + disk_tokens
        load = self.load_ms(loaded)
        prefill = self.prefill_ms(tokens, gpu_tokens + loaded)
        store = self.store_ms(tokens, gpu_tokens, loaded, has_cpu)
        if self.layer_by_layer:
            ttft = max(load, prefill) + (min(load, prefill) + store) / self.layers
        else:
            ttft = load + prefill + store
        read = self.disk_ms(disk_tokens) if disk_tokens else 0.0
        return load + read, prefill, ttft + read

    def predict_mix(self, tokens, gpu_tokens, cpu_tokens, has_cpu=True):
        """The TTFT of one request (the per-tier model's interface: kvlab/latency/model.py)."""
        return self.parts_ms(tokens, gpu_tokens, cpu_tokens, has_cpu)[2]

    def decode_ms(self, contexts):
        """One decode step of a batch whose requests hold ``contexts`` tokens each."""
        if self.database is not None:
            return self.database.decode_ms(len(contexts), max(1, math.ceil(sum(contexts) / len(contexts))))
        settings = self.settings
        factors = settings.efficiencies()
        return roofline.decode_ms(
            self.shape, self.system, factors, contexts, settings.tp, settings.all_reduce, settings.kv_dtype
        )
