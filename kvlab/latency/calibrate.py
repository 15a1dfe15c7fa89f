"""Calibration: the hardware model's factors (``kvlab/latency/hardware.py``) fitted to a measurement.

A measured request is a sample ``(tokens, gpu_tokens, cpu_tokens, ttft_ms)``: its prompt's length, the tokens it
found on the GPU and the ones it loaded from the CPU tier. :func:`calibrate` fits the named
:class:`~kvlab.latency.hardware.HardwareSettings` factors so that :class:`~kvlab.latency.hardware.HardwareModel`'s
TTFT meets the measured ones, by ``scipy.optimize.least_squares`` on the relative residuals
``predicted / measured - 1`` (every request weighs the same, a 30 ms hit as much as a 1 s recompute), within the
factors' bounds (an efficiency in (0, 1], a link's GB/s above 0, an overhead of 0 ms or more). Only the roofline
has factors: the database's kernels are measured, and a fit over them is refused.

The fit runs in the time each factor prices: the reciprocal of an efficiency or of the link's GB/s, and the ms of
an overhead as they are, so that a TTFT is nearly linear in every fitted value (``overhead + bytes / link +
FLOPs / (peak x efficiency)``) and the fit converges from any start. It starts at the settings' values and draws
nothing at random: the same samples and settings give the same factors. A factor the samples cannot tell
(no sample's TTFT moves with it, e.g. the link when no request loaded from the CPU; or one that moves every TTFT
as the others together do) is not fitted: it stays at its start value and is listed as ``not_identified``.

With one document length, the tiers of the lab's document-level design are three equations for three unknowns:
a GPU hit's TTFT is the overhead (and one computed token), a CPU load's the overhead and the link's part, a
recompute's the overhead and the prefill. :func:`measurement_samples` tells each measured request's tier the way
``kvlab ttft fit`` does (``kvlab/latency/ttft.py``'s replay through the lab's design or a real server's), and
:func:`calibrate_measurement` fits on some documents and compares the others' per-(config, pass) p50.
"""

import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

from kvlab.latency.hardware import HardwareModel
from kvlab.latency.ttft import measured_requests, pass_reads, served_tiers, setting_document
from kvlab.util.errors import KvlabError, SettingError

__all__ = [
    "FACTORS",
    "FIT",
    "Calibration",
    "Sample",
    "calibrate",
    "calibrate_measurement",
    "held_out_report",
    "measurement_samples",
    "samples_from_tiers",
]

FIT = ("efficiency", "link_gbps", "overhead_ms")  # the factors fitted by default


class Factor(NamedTuple):
    """How a setting is fitted: ``reciprocal`` fits 1 / value (an efficiency, a rate), else the value itself; the
    value's bounds (closed, as the settings accept them)."""

    reciprocal: bool
    low: float
    high: float


FACTORS = {
    "efficiency": Factor(True, 1e-6, 1.0),
    "memory_efficiency": Factor(True, 1e-6, 1.0),
    "link_gbps": Factor(True, 1e-6, 1e6),
    "overhead_ms": Factor(False, 0.0, 1e8),
    "copy_us": Factor(False, 1e-9, 1e8),
    "link_latency_ms": Factor(False, 0.0, 1e8),
}
SIGNIFICANT = 6  # digits of a reported factor
UNSEEN = 1e-6  # a factor whose change of a quarter moves no sample's TTFT by this fraction is not seen
DEPENDENT = 1e-6  # a singular value of the normalized sensitivities below this fraction: factors not told apart
MAX_EVALUATIONS = 2000


class Sample(NamedTuple):
    """One measured request: ``tokens`` in the prompt, the first ``gpu_tokens`` GPU hits, the next ``cpu_tokens``
    CPU hits, and its measured TTFT."""

    tokens: int
    gpu_tokens: int
    cpu_tokens: int
    ttft_ms: float


def checked_samples(samples):
    """The samples as :class:`Sample`; KvlabError naming the first that is not one (a relative residual needs a
    TTFT above 0)."""
    checked = []
    for number, sample in enumerate(samples):
        try:
            tokens, gpu, cpu, ttft = sample
        except (TypeError, ValueError):
            raise KvlabError(f"sample {number}: expected (tokens, gpu_tokens, cpu_tokens, ttft_ms)") from None
        for name, value in (("tokens", tokens), ("gpu_tokens", gpu), ("cpu_tokens", cpu)):
            if type(value) is not int or value < 0:
                raise KvlabError(f"sample {number}: {name} must be a whole number >= 0, got {value!r}")
        if tokens < 1 or gpu + cpu > tokens:
            raise KvlabError(f"sample {number}: 1 <= tokens and gpu_tokens + cpu_tokens <= tokens, got {sample!r}")
        if isinstance(ttft, bool) or not isinstance(ttft, (int, float)) or not 0 < ttft < math.inf:
            raise KvlabError(f"sample {number}: ttft_ms must be a number above 0 (relative residuals), got {ttft!r}")
        checked.append(Sample(tokens, gpu, cpu, float(ttft)))
    if not checked:
        raise KvlabError("no samples to calibrate on")
    return checked


def fit_names(fit):
    names = tuple(fit)
    unknown = [name for name in names if name not in FACTORS]
    if unknown or len(set(names)) != len(names) or not names:
        raise SettingError(f"the factors to fit are some of {', '.join(FACTORS)}, each once; got {', '.join(names)}")
    return names


def start_values(model):
    """Every factor's start: the settings' value, or what the model uses where the setting says "default"."""
    settings = model.settings
    return {
        "efficiency": settings.efficiency,
        "memory_efficiency": settings.memory_efficiency,
        "overhead_ms": settings.overhead_ms,
        "link_gbps": model.link.peak_gbps,
        "copy_us": model.link.copy_us,
        "link_latency_ms": model.link.latency_ms,
    }


class Problem:
    """The fit's residuals as a function of the fitted factors (in the fit's space: reciprocals and ms)."""

    def __init__(self, base, samples, names):
        self.base, self.names = base, names
        self.splits = sorted({sample[:3] for sample in samples})  # each distinct request priced once
        self.index = [self.splits.index(sample[:3]) for sample in samples]
        self.measured = [sample.ttft_ms for sample in samples]

    def settings(self, x):
        values = {name: to_value(name, value) for name, value in zip(self.names, x, strict=True)}
        return self.base.settings.replace(**values)

    def predicted(self, x):
        model = self.base.with_settings(self.settings(x))
        priced = [model.parts_ms(*split)[2] for split in self.splits]
        return [priced[index] for index in self.index]

    def residuals(self, x):
        return [p / m - 1 for p, m in zip(self.predicted(x), self.measured, strict=True)]


def to_space(name, value):
    return 1 / value if FACTORS[name].reciprocal else value


def to_value(name, value):
    return 1 / value if FACTORS[name].reciprocal else value


def space_bounds(name):
    factor = FACTORS[name]
    if factor.reciprocal:
        return 1 / factor.high, 1 / factor.low
    return factor.low, factor.high


def unidentified(problem, x):
    """The factors the samples cannot tell at ``x``: those no sample's TTFT moves with (a quarter's change of the
    factor, or a millisecond for one at 0), then, while the rest move the TTFTs only as some others together do,
    the one most in that direction (the later in the fit's order among equals)."""
    import numpy as np

    base = np.asarray(problem.residuals(x))
    columns, kept = [], []
    for position, name in enumerate(problem.names):
        low, high = space_bounds(name)
        step = max(abs(x[position]) * 0.25, 1.0 if not FACTORS[name].reciprocal else 1e-9)
        moved = list(x)
        moved[position] = x[position] + step if x[position] + step <= high else max(low, x[position] - step)
        column = np.asarray(problem.residuals(moved)) - base
        if np.max(np.abs(column)) > UNSEEN:
            columns.append(column / np.linalg.norm(column))
            kept.append(name)
    dropped = [name for name in problem.names if name not in kept]
    while len(kept) > 1:
        matrix = np.column_stack(columns)
        _, singular, vectors = np.linalg.svd(matrix, full_matrices=False)
        if singular[-1] >= DEPENDENT * singular[0]:
            break
        weights = np.abs(vectors[-1])
        worst = max(range(len(kept)), key=lambda i: (round(float(weights[i]), 9), i))
        dropped.append(kept.pop(worst))
        columns.pop(worst)
    return [name for name in problem.names if name in dropped]


def significant(value, digits=SIGNIFICANT):
    return float(f"{value:.{digits}g}")


def residual_summary(predicted, measured):
    """Median and largest absolute residual, in ms and relative to the measured TTFT."""
    absolute = [abs(p - m) for p, m in zip(predicted, measured, strict=True)]
    relative = [abs(p / m - 1) for p, m in zip(predicted, measured, strict=True)]
    return {
        "median_abs_ms": round(statistics.median(absolute), 3),
        "max_abs_ms": round(max(absolute), 3),
        "median_abs_relative": round(statistics.median(relative), 4),
        "max_abs_relative": round(max(relative), 4),
    }


@dataclass(frozen=True)
class Calibration:
    """A fit's outcome: ``settings`` with the fitted factors; every factor's value (``factors``, rounded to 6
    significant digits) and start; those fitted and those the samples could not tell (left at their start); the
    per-sample residuals (predicted - measured, ms) and their summary."""

    settings: object
    block_tokens: int
    fit: tuple
    factors: dict
    start: dict
    fitted: tuple
    not_identified: tuple
    residuals_ms: tuple
    residuals: dict
    n: int
    converged: bool
    message: str

    def model(self):
        return HardwareModel(self.settings, self.block_tokens)

    def describe(self):
        return {
            "fit": list(self.fit),
            "fitted": list(self.fitted),
            "not_identified": list(self.not_identified),
            "start": self.start,
            "factors": self.factors,
            "n": self.n,
            "residuals": self.residuals,
            "converged": self.converged,
            "optimizer": self.message,
        }


def calibrate(samples, settings, block_tokens, fit=FIT):
    """Fit ``fit``'s factors of ``settings`` (a :class:`~kvlab.latency.hardware.HardwareSettings` of the roofline)
    to ``samples`` ``(tokens, gpu_tokens, cpu_tokens, ttft_ms)`` priced with ``block_tokens``-token blocks: a
    :class:`Calibration`. SettingError for another latency source or an unknown factor."""
    import numpy as np
    from scipy.optimize import least_squares

    names = fit_names(fit)
    if settings.latency_source != "roofline":
        raise SettingError(
            f"--latency-source {settings.latency_source}: calibration fits the roofline's factors; the database's"
            " kernels are measured, not factors (use --latency-source roofline)"
        )
    samples = checked_samples(samples)
    base = HardwareModel(settings, block_tokens)
    start = start_values(base)
    clipped = {name: min(max(start[name], FACTORS[name].low), FACTORS[name].high) for name in names}
    problem = Problem(base, samples, names)
    x0 = [to_space(name, clipped[name]) for name in names]
    skipped = unidentified(problem, x0)
    fitted = tuple(name for name in names if name not in skipped)
    values = {}
    converged, message = True, "nothing to fit"
    if fitted:
        problem = Problem(base, samples, fitted)
        x0 = np.asarray([to_space(name, clipped[name]) for name in fitted])
        bounds = tuple(zip(*(space_bounds(name) for name in fitted), strict=True))
        result = least_squares(
            problem.residuals,
            x0,
            bounds=bounds,
            method="trf",
            x_scale="jac",
            ftol=1e-12,
            xtol=1e-12,
            gtol=1e-12,
            max_nfev=MAX_EVALUATIONS,
        )
        values = {name: float(to_value(name, value)) for name, value in zip(fitted, result.x, strict=True)}
        converged, message = bool(result.success), str(result.message)
    fitted_settings = settings.replace(**values)
    model = HardwareModel(fitted_settings, block_tokens)  # the reported figures: a model built anew
    predicted = [model.parts_ms(*sample[:3])[2] for sample in samples]
    measured = [sample.ttft_ms for sample in samples]
    final = start_values(model)
    return Calibration(
        settings=fitted_settings,
        block_tokens=block_tokens,
        fit=names,
        factors={name: significant(final[name]) for name in names},
        start={name: significant(start[name]) for name in names},
        fitted=fitted,
        not_identified=tuple(skipped),
        residuals_ms=tuple(p - m for p, m in zip(predicted, measured, strict=True)),
        residuals=residual_summary(predicted, measured),
        n=len(samples),
        converged=converged,
        message=message,
    )


def held_out_report(settings, block_tokens, groups):
    """Predicted vs measured p50 per group ``{(config, pass): [samples]}`` (in its order), priced in ``settings``;
    and the worst relative p50 error."""
    model = HardwareModel(settings, block_tokens)
    rows = []
    for (config, name), samples in groups.items():
        samples = checked_samples(samples)
        measured = statistics.median(sample.ttft_ms for sample in samples)
        predicted = statistics.median(model.parts_ms(*sample[:3])[2] for sample in samples)
        rows.append(
            {
                "config": config,
                "pass": name,
                "n": len(samples),
                "measured_p50_ms": round(measured, 2),
                "predicted_p50_ms": round(predicted, 2),
                "p50_ratio": round(predicted / measured, 4),
                "p50_error": round(abs(predicted / measured - 1), 4),
            }
        )
    return {"passes": rows, "max_p50_error": max((row["p50_error"] for row in rows), default=0.0)}


# -- from a measurement ------------------------------------------------------------------------------------------

TIER_SPLIT = {  # a whole document's request per tier: (gpu_tokens, cpu_tokens) of its tokens
    "gpu_hit": lambda tokens: (tokens, 0),  # the lab's GPU hit; llama-cpp: the document is in the context
    "cpu_load": lambda tokens: (0, tokens),  # the lab's CPU load; llama-cpp: its saved state restored from RAM
    "recompute": lambda tokens: (0, 0),
    "recompute_offload": lambda tokens: (0, 0),  # the hardware model prices no store: its time is in the residual
}


def samples_from_tiers(requests, served):
    """``{key: (tier, Sample)}`` of measured ``requests`` ``{key: (tokens, ttft_ms)}`` served as ``served``
    ``{key: tier}`` (a key ``(config, pass, doc)``), a document one request of one tier."""
    samples = {}
    for key, (tokens, ttft) in requests.items():
        tier = served[key]
        samples[key] = (tier, Sample(tokens, *TIER_SPLIT[tier](tokens), ttft))
    return samples


def measurement_samples(path, configs, passes, docs, tokens, server=None):
    """``{(config, pass, doc): (tier, Sample)}`` of the measurement at ``path``: each request's tier as ``kvlab
    ttft fit`` tells it (``kvlab/latency/ttft.py``: the setting's reads replayed per config through the lab's design,
    or ``server``'s, e.g. ``("llama-cpp", state_extra_tokens)``)."""
    reads = pass_reads(passes, docs)
    requests = measured_requests(path, configs, dict(passes), docs)
    if not requests:
        raise KvlabError(f"{path}: no requests to calibrate on")
    return samples_from_tiers(requests, served_tiers(requests, configs, reads, docs, tokens, server))


def tier_residuals(model, tiered):
    """Per tier: n, the measured median and the predicted one, of ``[(tier, Sample)]``."""
    found = {}
    for tier, sample in tiered:
        found.setdefault(tier, []).append(sample)
    described = {}
    for tier in TIER_SPLIT:
        if tier in found:
            measured = [sample.ttft_ms for sample in found[tier]]
            predicted = [model.parts_ms(*sample[:3])[2] for sample in found[tier]]
            described[tier] = {
                "n": len(measured),
                "measured_p50_ms": round(statistics.median(measured), 2),
                "predicted_p50_ms": round(statistics.median(predicted), 2),
                **residual_summary(predicted, measured),
            }
    return described


def calibrate_measurement(
    path, configs, passes, docs, tokens, settings, block_tokens=None, server=None, fit_docs=None, fit=FIT
):
    """The calibration document of a measurement: the factors fitted on ``fit_docs``' requests (all when None),
    the residuals (all and per tier), and per config and pass the held-out documents' predicted vs measured p50
    (in sample, all documents, when ``fit_docs`` is None). ``block_tokens`` defaults to the longest document
    (one block per document, the lab's design)."""
    samples = measurement_samples(path, configs, passes, docs, tokens, server)
    held = {key: value for key, value in samples.items() if fit_docs is not None and key[2] not in fit_docs}
    training = {key: value for key, value in samples.items() if key not in held}
    if fit_docs is not None and not held:
        raise KvlabError(f"{path}: every request is of a fitted document: none is left to compare")
    if not training:
        raise KvlabError(f"{path}: no request is of a fitted document")
    block = block_tokens or max(sample.tokens for _, sample in samples.values())
    calibration = calibrate([sample for _, sample in training.values()], settings, block, fit)
    model = calibration.model()
    compared = held or samples
    groups = {}
    for config in configs:
        for name, _ in passes:
            mine = [sample for key, (_, sample) in compared.items() if key[:2] == (config, name)]
            if mine:
                groups[config, name] = mine
    report = held_out_report(calibration.settings, block, groups)
    for row in report["passes"]:
        tiers = [tier for key, (tier, _) in compared.items() if key[:2] == (row["config"], row["pass"])]
        row["tiers"] = {tier: tiers.count(tier) for tier in TIER_SPLIT if tier in tiers}
    unfitted = sorted({tier for tier, _ in compared.values()} - {tier for tier, _ in training.values()})
    return {
        "measurement": Path(path).name,
        "setting": {
            **setting_document(docs, tokens, configs, passes, server, fit_docs),
            **({"tiers_not_fitted": unfitted} if unfitted else {}),
            "block_tokens": block,
        },
        "hardware": model.describe(),
        "hardware_settings": asdict(calibration.settings),  # the fitted settings, as kvlab ttft predict's flags
        "calibration": calibration.describe(),
        "fitted_tiers": tier_residuals(model, training.values()),
        "compared_tiers": tier_residuals(model, compared.values()),
        **report,
    }
