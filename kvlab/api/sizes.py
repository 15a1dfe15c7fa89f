"""``kvlab.size``: a model's KV cache per GPU, layer group by layer group (what ``kvlab size`` prints)."""

import json
from dataclasses import dataclass, field

from kvlab.api.common import (
    _choice,
    _frame,
    _grid,
    _Result,
    _setting,
)
from kvlab.util.errors import SettingError
from kvlab.util.files import dump_json


@dataclass(frozen=True)
class Size(_Result):
    """What ``kvlab size`` prints: a model's KV per token on one GPU, and a prompt's."""

    model: str
    tp: int
    kv_dtype: str
    bytes_per_token: int
    tokens: int | None
    gib_for_tokens: float | None
    text: str = field(repr=False)

    @classmethod
    def of(cls, text):
        document = json.loads(text)
        names = ("model", "tp", "kv_dtype", "bytes_per_token")
        return cls(
            **{key: document[key] for key in names},
            **{key: document.get(key) for key in ("tokens", "gib_for_tokens")},
            text=text,
        )

    def to_frame(self):
        """One row per layer group: its kind, layers, bytes per token (and per request, where it is bounded)."""
        return _frame(self.to_dict()["groups"])


def size(*, model_config, tp=1, kv_dtype="auto", tokens=None, gib=None):
    """A model's KV cache as an engine allocates it, layer group by layer group (``kvlab size``'s flags): the bytes per
    token on one GPU, and the GiB a prompt of ``tokens`` takes (or the tokens ``gib`` holds). A :class:`Size`, or a
    :class:`Grid` of them where ``tokens`` or ``gib`` is a list."""
    return _grid(_size, dict(locals()), ("tokens", "gib"))


def fitting(shape, budget, tp, kv_dtype):
    """The most tokens one prompt may have within ``budget`` bytes (the bytes never fall as a prompt grows)."""
    from kvlab.util.numbers import MAX_WHOLE

    if shape.bytes_for(1, tp, kv_dtype) > budget:
        return 0
    low, high = 1, 1
    while shape.bytes_for(high, tp, kv_dtype) <= budget and high < MAX_WHOLE:
        low, high = high, min(2 * high, MAX_WHOLE)
    if shape.bytes_for(high, tp, kv_dtype) <= budget:
        return high
    while high - low > 1:  # bytes_for(low) fits, bytes_for(high) does not
        middle = (low + high) // 2
        low, high = (middle, high) if shape.bytes_for(middle, tp, kv_dtype) <= budget else (low, middle)
    return low


def _size(*, model_config, tp, kv_dtype, tokens, gib):
    from kvlab.sizing.model_size import KV_DTYPES, decimal_gib, read_model_config
    from kvlab.sizing.model_size import gib as gib_of
    from kvlab.sizing.plan import model_name
    from kvlab.util.numbers import GIB, MAX_WHOLE
    from kvlab.workloads import whole_number

    tp = _setting("tp", whole_number(1, 2**20), tp)
    kv_dtype = _choice("kv_dtype", kv_dtype, tuple(KV_DTYPES))
    tokens = _setting("tokens", whole_number(0, MAX_WHOLE), tokens)
    budget = _setting("gib", decimal_gib, gib)
    if tokens is not None and budget is not None:
        raise SettingError("argument --gib: not allowed with argument --tokens")
    shape = read_model_config(model_config)
    try:
        per_token = shape.bytes_per_token(tp, kv_dtype)
    except ValueError as error:
        raise SettingError(f"--tp: {error}") from None
    result = {
        "model": model_name(model_config),
        "tp": tp,
        "kv_dtype": kv_dtype,
        "element_bytes": shape.element_bytes(kv_dtype),
        "groups": shape.groups(tp, kv_dtype),
        "bytes_per_token": per_token,
    }
    if budget is not None:
        tokens = fitting(shape, int(budget * GIB), tp, kv_dtype)
        result["gib"] = float(budget)
    if tokens is not None:
        held = shape.bytes_for(tokens, tp, kv_dtype)
        result.update(tokens=tokens, bytes=held, gib_for_tokens=gib_of(held, 1))
    return Size.of(dump_json(result))
