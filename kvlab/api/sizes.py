"""``kvlab.size``: a model's KV cache per GPU, layer group by layer group (what ``kvlab size`` prints)."""

import json
from dataclasses import dataclass, field
from decimal import Decimal

from kvlab.api.common import _bound, _declared, _frame, _grid, _Result
from kvlab.sizing.model_size import MAX_GIB, decimal_gib, kv_dtype_setting
from kvlab.util.errors import SettingError
from kvlab.util.files import dump_json
from kvlab.util.numbers import MAX_WHOLE
from kvlab.util.settings import Declared, name_or_file, setting
from kvlab.workloads import whole_number


@dataclass(frozen=True, kw_only=True)
class SizeSettings(Declared):
    """``kvlab size``'s flags and ``kvlab.size``'s keywords, declared once (kvlab/util/settings.py)."""

    model_config: str = setting(convert=name_or_file, metavar="FILE", help="the model's Hugging Face config.json")
    tp: int = setting(1, convert=whole_number(1, 2**20), help="tensor-parallel ranks (default 1)")
    kv_dtype: str = kv_dtype_setting()
    tokens: int | None = setting(
        None, convert=whole_number(0, MAX_WHOLE), exclusive=("amount", False), help="the GiB a prompt this long takes"
    )
    gib: Decimal | None = setting(
        None,
        convert=decimal_gib,
        exclusive=("amount", False),
        help=f"the tokens one prompt may have in this many GiB (<= {MAX_GIB})",
    )

    def check(self):
        if self.tokens is not None and self.gib is not None:
            raise SettingError("argument --gib: not allowed with argument --tokens")


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


def size(**settings):
    """A model's KV cache as an engine allocates it, layer group by layer group (``kvlab size``'s flags:
    :class:`SizeSettings`): the bytes per token on one GPU, and the GiB a prompt of ``tokens`` takes (or the tokens
    ``gib`` holds). A :class:`Size`, or a :class:`Grid` of them where ``tokens`` or ``gib`` is a list."""
    return _grid(_size, _bound(size, settings), ("tokens", "gib"))


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
    from kvlab.sizing.model_size import gib as gib_of
    from kvlab.sizing.model_size import read_model_config
    from kvlab.sizing.plan import model_name
    from kvlab.util.numbers import GIB

    checked = SizeSettings(model_config=model_config, tp=tp, kv_dtype=kv_dtype, tokens=tokens, gib=gib)
    tp, kv_dtype, tokens, budget = checked.tp, checked.kv_dtype, checked.tokens, checked.gib
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


size.__signature__ = _declared((), SizeSettings, {}, rest=None)
