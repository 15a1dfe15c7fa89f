"""From hits to time: a TTFT model per tier, fitted to a measurement whose requests the cache replays.

Each measured request is served one way, which the lab's design tells when it replays the same requests in
the same setting (``kvlab/loop.py``'s document reads through the reference engine, the lab simulator's
rules): a GPU hit, a load from the CPU, or a recompute. A recompute in a config that has a CPU tier also
writes the new KV cache to it (write-through), so it is its own tier, ``recompute_offload``. Per tier the
model is the median TTFT when every request has the same length, and a least-squares line in the prompt's
tokens when lengths vary; the residuals say how well that holds.

A request served partly from each tier (the block-level replay) is predicted as the mix of the
tiers' times for its length, weighted by the tokens each served: a request whose prompt is half
loaded and half recomputed takes half a load plus half a recompute.
"""

import statistics
from dataclasses import dataclass

import numpy as np

__all__ = ["MAX_MS", "TIERS", "LatencyModel", "TierFit", "tier_of"]

MAX_MS = 10**9  # about 11.6 days: no latency is longer (a measured 1.7e308 ms is a broken file, not a time)

TIERS = ("gpu_hit", "cpu_load", "recompute", "recompute_offload")
ACCESS_TIER = {"gpu": "gpu_hit", "cpu": "cpu_load", "miss": "recompute"}


def tier_of(access, has_cpu):
    """The tier of one request's answer (``"gpu"``, ``"cpu"``, ``"miss"``: ``kvlab.loop.tiers``) in a config
    with (or without) a CPU tier."""
    tier = ACCESS_TIER[access]
    return "recompute_offload" if tier == "recompute" and has_cpu else tier


@dataclass(frozen=True)
class TierFit:
    """``ttft_ms = intercept_ms + ms_per_token * tokens`` for one tier, with the residuals it left."""

    n: int
    intercept_ms: float
    ms_per_token: float
    residual_median_abs_ms: float
    residual_max_abs_ms: float

    def predict(self, tokens):
        return self.intercept_ms + self.ms_per_token * tokens

    @classmethod
    def fit(cls, tokens, ttft_ms):
        """The median if every request has the same length, else the least-squares line."""
        tokens = np.asarray(tokens, dtype=np.float64)
        ttft_ms = np.asarray(ttft_ms, dtype=np.float64)
        if len(set(tokens.tolist())) > 1:
            slope, intercept = np.polyfit(tokens, ttft_ms, 1)
        else:
            slope, intercept = 0.0, statistics.median(ttft_ms.tolist())
        residuals = np.abs(ttft_ms - (intercept + slope * tokens))
        return cls(
            n=len(tokens),
            intercept_ms=float(intercept),
            ms_per_token=float(slope),
            residual_median_abs_ms=float(np.median(residuals)),
            residual_max_abs_ms=float(residuals.max()),
        )

    def describe(self):
        return {
            "n": self.n,
            "intercept_ms": round(self.intercept_ms, 3),
            "ms_per_token": round(self.ms_per_token, 6),
            "residual_median_abs_ms": round(self.residual_median_abs_ms, 2),
            "residual_max_abs_ms": round(self.residual_max_abs_ms, 2),
        }


class LatencyModel:
    """Per-tier fits; predicts a request's TTFT from its tier (or its tokens per tier) and its length."""

    def __init__(self, fits):
        self.fits = dict(fits)

    @classmethod
    def fit(cls, samples):
        """``samples``: ``(tier, tokens, ttft_ms)`` per measured request."""
        grouped = {}
        for tier, tokens, ttft in samples:
            grouped.setdefault(tier, ([], []))
            grouped[tier][0].append(tokens)
            grouped[tier][1].append(ttft)
        return cls({tier: TierFit.fit(*grouped[tier]) for tier in TIERS if tier in grouped})

    def tier(self, name):
        if name not in self.fits:
            fitted = ", ".join(self.fits) or "none"
            raise ValueError(
                f"this model has no {name} time, its measurement had no {name} request (it has {fitted}):"
                " measure a setting that serves some (a recompute with offload needs a config with a CPU tier),"
                " or price from the hardware (--gpu-system; kvlab ttft predict)"
            )
        return self.fits[name]

    def predict(self, tier, tokens):
        """TTFT of a request of ``tokens`` tokens served wholly by ``tier``."""
        return self.tier(tier).predict(tokens)

    def predict_mix(self, tokens, gpu_tokens, cpu_tokens, has_cpu):
        """TTFT of a request whose first ``gpu_tokens`` come from the GPU, the next ``cpu_tokens`` from the CPU,
        and the rest are recomputed: the tiers' times for its length, weighted by their tokens."""
        if tokens == 0:
            return 0.0
        computed = tokens - gpu_tokens - cpu_tokens
        time = 0.0
        for tier, share in (
            ("gpu_hit", gpu_tokens),
            ("cpu_load", cpu_tokens),
            ("recompute_offload" if has_cpu else "recompute", computed),
        ):
            if share:
                time += share / tokens * self.predict(tier, tokens)
        return time

    def describe(self):
        return {tier: self.fits[tier].describe() for tier in TIERS if tier in self.fits}

    @classmethod
    def from_description(cls, description):
        """The model back from :meth:`describe` (as the pipeline hands it from one job to the next);
        ValueError if it is not one."""
        if not isinstance(description, dict):
            raise ValueError("expected the tiers as a JSON object")
        fits = {}
        for tier, fit in description.items():
            if tier not in TIERS or not isinstance(fit, dict):
                raise ValueError(f"not a tier's fit: {tier!r}")
            values = [fit[field] for field in TierFit.__dataclass_fields__]
            if any(isinstance(value, bool) or not isinstance(value, (int, float)) for value in values):
                raise ValueError(f"tier {tier}: every field must be a number")
            fits[tier] = TierFit(*values)
        return cls(fits)
