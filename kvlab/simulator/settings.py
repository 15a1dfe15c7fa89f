"""The engine's settings: each field is a flag of ``kvlab simulate`` (``--max-num-batched-tokens`` ...) and a keyword
of ``kvlab.simulate``; vLLM's flags of the same names where vLLM has one."""

from dataclasses import dataclass, fields

from kvlab.serving import ENGINES
from kvlab.util.errors import SettingError

__all__ = ["GENERATED_BLOCKS", "MAX_OUTPUT_TOKENS", "SCHEDULERS", "EngineSettings", "engine_setting_names"]

GENERATED_BLOCKS = ("keep", "drop")
SCHEDULERS = tuple(dict.fromkeys(engine.scheduler for engine in ENGINES.values() if engine.scheduler))
# The longest output a request may ask (--output-tokens), in tokens: a model's context holds prompt and output, and the
# longest context of any model is Llama 4 Scout's 10 million (meta-llama/Llama-4-Scout-17B-16E); the shipped models'
# reach 393,216 (models/Devstral-Small-2-24B-Instruct/config.json max_position_embeddings). The engine steps once per
# output token, so 10**8 ran for minutes, saying nothing (issue 36); 10**7 on one request takes seconds.
MAX_OUTPUT_TOKENS = 10**7


UTILIZATION = (1e-9, 1)  # --gpu-memory-utilization: a share of the GPU's memory


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    """``scheduler``: vLLM v1's (kvlab/simulator/events.py ``Simulator._step``) or SGLang's
    (``Simulator._step_sglang``);
    ``max_num_batched_tokens`` and ``max_num_seqs``: a step's token budget and its most requests (8,192 and 256,
    aisimulate's and vLLM's for online serving on large GPUs: ``vllm/engine/arg_utils.py``
    ``_set_default_args``); ``chunked_prefill``: a prompt longer than the budget left is cut (vLLM v1 always);
    ``generated_blocks``: ``keep`` caches a request's full generated blocks when it lets go of them (vLLM hashes
    every full block), ``drop`` frees them empty (the sequential replay's rule: it caches prompt blocks only);
    ``output_tokens``: every request's output length (default: the trace's); ``gpu_blocks``/``cpu_blocks``: the
    tiers in blocks (default: the engine's memory rule; the ``--cpu-tokens`` room)."""

    scheduler: str = "vllm"
    gpu_blocks: int | None = None
    cpu_blocks: int | None = None
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    chunked_prefill: bool = True
    generated_blocks: str = "keep"
    output_tokens: int | None = None
    gpu_memory_utilization: float = 0.9

    def __post_init__(self):
        for name in ("gpu_blocks", "cpu_blocks", "output_tokens", "max_num_batched_tokens", "max_num_seqs"):
            value = getattr(self, name)
            low = 0 if name in ("gpu_blocks", "cpu_blocks") else 1
            if value is not None and (type(value) is not int or value < low):
                raise SettingError(
                    f"argument --{name.replace('_', '-')}: expected a whole number >= {low}, got {value!r}"
                )
        if self.output_tokens is not None and self.output_tokens > MAX_OUTPUT_TOKENS:
            raise SettingError(
                f"argument --output-tokens: expected a whole number <= {MAX_OUTPUT_TOKENS} (no model's context is"
                f" longer), got {self.output_tokens!r}"
            )
        if self.scheduler not in SCHEDULERS:
            raise SettingError(f"argument --scheduler: must be one of vllm, sglang, got {self.scheduler!r}")
        if self.generated_blocks not in GENERATED_BLOCKS:
            raise SettingError(f"argument --generated-blocks: must be one of keep, drop, got {self.generated_blocks!r}")
        utilization = self.gpu_memory_utilization
        low, high = UTILIZATION
        if isinstance(utilization, bool) or not isinstance(utilization, int | float) or not low <= utilization <= high:
            raise SettingError(
                f"argument --gpu-memory-utilization: expected a number from {low:g} to {high:g}, got {utilization!r}"
            )

    def check_sequence(self, number, tokens, output):
        """SettingError when request ``number`` (from 1), ``tokens`` of prompt and ``output`` tokens, is longer at its
        longest (recomputed after a preemption) than a step's budget while chunked prefill is off: no step could ever
        compute it. vLLM refuses such a budget at start (``vllm/config/scheduler.py``
        ``SchedulerConfig.verify_max_model_len``: max_num_batched_tokens below max_model_len without chunked
        prefill); a trace's lengths are known as it is read, so here the first such request stops the run."""
        longest = tokens + output - 1
        if self.chunked_prefill or longest <= self.max_num_batched_tokens:
            return
        raise SettingError(
            f"request {number}: its prompt of {tokens} tokens and {output} of output need steps of up to {longest}"
            f" tokens, more than --max-num-batched-tokens {self.max_num_batched_tokens}, and with --no-chunked-prefill"
            " a step computes a prompt whole (vLLM refuses a budget below its model length so, at start): give a"
            " larger --max-num-batched-tokens or leave chunked prefill on"
        )

    def describe(self):
        return {field.name: getattr(self, field.name) for field in fields(self)}


def engine_setting_names():
    return tuple(field.name for field in fields(EngineSettings))
