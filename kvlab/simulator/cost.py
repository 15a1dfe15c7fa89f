"""What a step of the engine costs: its prefill chunks and its decode batch priced by the hardware model
(``kvlab/latency/hardware.py``), and the copies over the links.

A mixed step (vLLM v1's chunked prefill puts prefill chunks and decodes in one forward pass) costs the sum of its
chunks' prefills, each with its cached prefix, and its decode batch: the measured database has no mixed-batch
query, and the sum counts each pass's fixed costs (the weights read, the launches) once per part, an overestimate
of a mixed step that is largest for short chunks. The decode batch is priced at its mean context rounded up to
:data:`DECODE_CONTEXT_STEP` tokens, so a run of decode steps has one price until the mean crosses a step (the event
loop prices such a run at once).
"""

import math

__all__ = ["DECODE_CONTEXT_STEP", "StepCost"]

DECODE_CONTEXT_STEP = 256  # tokens: the grain of the decode batch's mean context


class StepCost:
    """Prices in ms from a :class:`kvlab.latency.hardware.HardwareModel` for blocks of ``block_tokens``."""

    def __init__(self, model, block_tokens):
        self.model = model
        self.block_tokens = block_tokens
        self._decode = {}

    def prefill_ms(self, tokens, cached):
        """A prefill chunk that ends at ``tokens`` with ``cached`` before it."""
        return self.model.prefill_ms(tokens, cached)

    def decode_ms(self, batch, context):
        """A decode step of ``batch`` requests that hold ``context`` tokens in all, at the mean's grain."""
        mean = context_step(context, batch)
        key = batch, mean
        price = self._decode.get(key)
        if price is None:
            price = self._decode[key] = self.model.decode_ms([mean] * batch)
        return price

    def known(self):
        """The prices the model has answered before (the measured database's memo, kvlab/latency/database.py), as
        ``(chunks, chunk_ms, steps, step_ms)``: int64 rows ``(tokens, cached)`` of :meth:`prefill_ms` and
        ``(batch, mean context)`` of :meth:`decode_ms`, and their ms; none for the roofline."""
        import numpy as np

        if self.model.database is None:
            rows = np.zeros((0, 2), dtype=np.int64)
            return rows, np.zeros(0), rows, np.zeros(0)
        (prefills, prefill_ms), (decodes, decode_ms) = self.model.database.answered()
        chunks = prefills[:, 0] == 1  # (batch, tokens, cached): one request's
        steps = decodes[:, 2] == 2  # (batch, context, osl): osl 2, one step
        return (
            np.ascontiguousarray(prefills[chunks][:, 1:]),
            prefill_ms[chunks],
            np.ascontiguousarray(decodes[steps][:, :2]),
            decode_ms[steps],
        )

    def copy_ms(self, blocks):
        """``blocks`` blocks over a link (either way: the link is priced the same both ways)."""
        return self.model.load_ms(blocks * self.block_tokens) if blocks else 0.0

    def describe(self):
        return {
            **self.model.describe(),
            "mixed_step": "sum of its prefill chunks and its decode batch (kvlab/simulator/cost.py)",
            "decode_context_step": DECODE_CONTEXT_STEP,
        }


def context_step(context, batch):
    """The mean context of a batch rounded up to :data:`DECODE_CONTEXT_STEP` tokens."""
    return math.ceil(math.ceil(context / batch) / DECODE_CONTEXT_STEP) * DECODE_CONTEXT_STEP
