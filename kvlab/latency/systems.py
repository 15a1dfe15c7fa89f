"""GPU systems, read from aiconfigurator-core's spec files without importing it, and what its database covers.

A system is aiconfigurator-core's ``systems/<name>.yaml`` (its ``gpu`` and ``node`` blocks: dense tensor-core
FLOP/s, HBM bandwidth, the PCIe and NVLink bandwidths per GPU and direction), or a YAML file of the same
fields (e.g. ``data/systems/ci-2vcpu.yaml``, a CPU for the llama.cpp calibration): the config check reads them
without the package's start-up. The engine versions its measured database holds are the package's own answer
(``sdk/perf_database.py``: ``get_supported_databases``, ``get_version_slots``), asked only by what prices time.
"""

import contextlib
import functools
import importlib.util
import io
import json
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from kvlab.util import user_cache
from kvlab.util.errors import SettingError
from kvlab.util.files import shown
from kvlab.util.numbers import yaml_text_number

__all__ = ["BACKENDS", "System", "database_version", "database_versions", "read_system", "system_names"]

PACKAGE = "aiconfigurator-core"
BACKENDS = {"vllm": "vllm", "lmcache": "vllm", "sglang": "sglang"}  # kvlab's engine -> the database's backend
NOT_SYSTEMS = {"attention_lane_defaults", "perf_data_reuse_manifest", "query_versions"}  # other YAML files there


@functools.cache
def package_dir():
    """aiconfigurator-core's folder, found without importing it (its import loads a compiled core)."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise SettingError(f"{PACKAGE} is not installed: `make run` installs the pinned one (requirements.txt)")
    return Path(next(iter(spec.submodule_search_locations)))


def package_version():
    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        raise SettingError(f"{PACKAGE} is not installed: `make run` installs the pinned one") from None


def systems_dir():
    return package_dir() / "systems"


def system_names():
    """The systems aiconfigurator-core ships a spec for, sorted."""
    return sorted(path.stem for path in systems_dir().glob("*.yaml") if path.stem not in NOT_SYSTEMS)


@dataclass(frozen=True)
class System:
    """One GPU of a system and its node, in SI units (FLOP/s, bytes/s per direction, seconds)."""

    name: str
    bf16_flops: float  # dense tensor-core FLOP/s in bfloat16
    fp8_flops: float  # the same in fp8 (0 where the GPU has none)
    mem_bw: float  # HBM bytes/s
    pcie_bw: float  # host <-> device bytes/s, one direction (the CPU tier's link)
    intra_node_bw: float  # GPU <-> GPU bytes/s in the node (NVLink), one direction
    gpus_per_node: int
    p2p_latency_s: float  # one collective step's fixed latency
    source: str  # where the figures come from
    mem_capacity: float = 0.0  # HBM bytes (0: not given)
    other_mem: float = 0.0  # bytes the runtime keeps besides weights, activations and KV (aiconfigurator's other_mem)

    def describe(self):
        return {
            "name": self.name,
            "bf16_tflops": round(self.bf16_flops / 1e12, 1),
            "fp8_tflops": round(self.fp8_flops / 1e12, 1),
            "mem_gbps": round(self.mem_bw / 1e9, 1),
            "pcie_gbps": round(self.pcie_bw / 1e9, 1),
            "nvlink_gbps": round(self.intra_node_bw / 1e9, 1),
            "gpus_per_node": self.gpus_per_node,
            "source": self.source,
        }


# A system file's figures, (lowest, highest, unit): from a slow CPU's to far past any GPU's. A figure outside is not
# a machine's (a slip of the exponent), and would price nothing a float can hold: 1e-300 FLOP/s overflows every time.
FIGURES = {
    **dict.fromkeys(("bfloat16_tc_flops", "fp8_tc_flops"), (1e6, 1e18, "FLOP/s")),
    **dict.fromkeys(("mem_bw", "pcie_bw", "intra_node_bw"), (1e6, 1e15, "bytes/s")),
    **dict.fromkeys(("mem_capacity", "other_mem"), (1e6, 1e15, "bytes")),
    "p2p_latency": (1e-9, 1, "seconds"),
}


def line_of(path, *keys):
    """``:LINE`` of ``keys`` in the YAML file ``path`` (of its deepest parent there), or "" where it cannot say."""
    import yaml

    from kvlab.util.files import line_of as found

    try:
        return f":{found(yaml.compose(path.read_text(encoding='utf-8')), keys)}"
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return ""


def read_system(name):
    """The :class:`System` of an aiconfigurator-core system name (``h100_sxm``) or of a YAML file of the same
    fields; SettingError naming the file and field when it is not one."""
    import yaml

    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        source = path.as_posix()
        if not path.is_file():
            raise SettingError(f"--gpu-system: no such file: {shown(source)}")
    else:
        path = systems_dir() / f"{name}.yaml"
        if name in NOT_SYSTEMS or not path.is_file():
            raise SettingError(
                f"--gpu-system: {shown(name)} is not a system of {PACKAGE} ({', '.join(system_names())})"
                " nor a .yaml file of one's fields"
            )
        source = f"{PACKAGE} {package_version()} systems/{name}.yaml"
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        where = getattr(error, "problem_mark", None)
        line = f":{where.line + 1}" if where is not None else ""
        raise SettingError(f"{path.as_posix()}{line}: not a YAML system file") from None
    gpu = (document or {}).get("gpu") if isinstance(document, dict) else None
    node = (document or {}).get("node") if isinstance(document, dict) else None
    if not isinstance(gpu, dict) or not isinstance(node, dict):
        raise SettingError(f"{path.as_posix()}: a system file has a `gpu` and a `node` mapping")

    def figure(block, key, label, optional=False):
        value = block.get(key)
        if value is None and optional:
            return 0.0
        low, high, unit = FIGURES[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            line = line_of(path, label, key)
            raise SettingError(
                f"{path.as_posix()}{line}: {label}.{key} must be a number of {unit} from {low:g} to {high:g},"
                f" got {shown(value)}{yaml_text_number(value)}"
            )
        return float(value)

    misc = document.get("misc")
    gpus = node.get("num_gpus_per_node", 1)
    if type(gpus) is not int or not 1 <= gpus <= 1024:
        raise SettingError(
            f"{path.as_posix()}: node.num_gpus_per_node must be a whole number 1..1024, got {shown(gpus)}"
        )
    return System(
        name=path.stem,
        bf16_flops=figure(gpu, "bfloat16_tc_flops", "gpu"),
        fp8_flops=figure(gpu, "fp8_tc_flops", "gpu", optional=True),
        mem_bw=figure(gpu, "mem_bw", "gpu"),
        pcie_bw=figure(node, "pcie_bw", "node"),
        intra_node_bw=figure(node, "intra_node_bw", "node", optional=True) or figure(node, "pcie_bw", "node"),
        gpus_per_node=gpus,
        p2p_latency_s=figure(node, "p2p_latency", "node", optional=True),
        source=source,
        mem_capacity=figure(gpu, "mem_capacity", "gpu", optional=True),
        other_mem=figure(misc, "other_mem", "misc", optional=True) if isinstance(misc, dict) else 0.0,
    )


@contextlib.contextmanager
def libyaml():
    """``yaml.safe_load`` through libyaml's loader (the same documents, the same objects) while aiconfigurator-core
    reads its 30-odd system and version files: most of its start-up in pure-Python YAML otherwise (about 0.5 s)."""
    import yaml

    if not hasattr(yaml, "CSafeLoader"):
        yield
        return
    original = yaml.safe_load
    yaml.safe_load = lambda stream: yaml.load(stream, Loader=yaml.CSafeLoader)  # noqa: S506 - the safe loader
    try:
        yield
    finally:
        yaml.safe_load = original


@functools.cache
def supported():
    """``{system: {backend: [versions]}}`` a query may name: the package's own ``get_supported_databases`` (its
    query_versions.yaml slots: current, previous, and next derived from the newest measured folder). Half a second
    of YAML, so kept in the user's cache (:mod:`kvlab.util.user_cache`) keyed by the package's version and folder."""
    path = user_cache.entry("aiconfigurator", ".json", "supported", package_version(), package_dir())
    kept = user_cache.read(path)
    if kept is not None:
        with contextlib.suppress(ValueError):
            return json.loads(kept)
    quiet = io.StringIO()
    with contextlib.redirect_stderr(quiet), libyaml():
        from aiconfigurator_core.sdk import perf_database

        found = {
            system: {backend: list(versions) for backend, versions in sorted(backends.items()) if versions}
            for system, backends in perf_database.get_supported_databases().items()
        }
    user_cache.keep(path, json.dumps(found, sort_keys=True).encode())
    return found


def database_versions(system):
    """``{backend: [versions]}`` the database holds measured kernels for on ``system``; empty for a system file of
    one's own, or a system it has none for."""
    return supported().get(system, {})


def current_version(system, backend):
    """The package's ``current`` slot for ``backend`` on ``system`` (``get_version_slots``), or None; kept in the
    user's cache as :func:`supported` is (importing the package's database module costs a tenth of a second)."""
    path = user_cache.entry("aiconfigurator", ".json", "current", package_version(), package_dir(), system, backend)
    kept = user_cache.read(path)
    if kept is not None:
        with contextlib.suppress(ValueError):
            return json.loads(kept)
    with contextlib.redirect_stderr(io.StringIO()), libyaml():
        from aiconfigurator_core.sdk import perf_database

        literal = (perf_database.get_version_slots(system, backend) or {}).get("current")
    user_cache.keep(path, json.dumps(literal).encode())
    return literal


def database_version(system, backend, requested=None):
    """The version the database prices ``backend`` on ``system`` with: ``requested`` if a query may name it, else
    its ``current`` slot (the package's ``get_version_slots``); SettingError if none."""
    held = database_versions(system).get(backend, [])
    if requested is not None:
        if requested not in held:
            raise SettingError(
                f"--engine-version {shown(requested)}: the database has {backend} on {system} at"
                f" {', '.join(held) or 'no version'} (kvlab ttft systems)"
            )
        return requested
    literal = current_version(system, backend) if held else None
    if literal not in held:
        raise SettingError(f"the database has no {backend} kernels on {system} (kvlab ttft systems)")
    return literal
