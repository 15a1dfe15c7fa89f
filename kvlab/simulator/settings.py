"""The engine's settings: each field is declared once (kvlab/util/settings.py), a flag of ``kvlab simulate``
(``--max-num-batched-tokens`` ...) and a keyword of ``kvlab.simulate``; vLLM's flags of the same names where vLLM has
one."""

from dataclasses import dataclass, fields

from kvlab.serving import ENGINES
from kvlab.util.errors import KvlabError, SettingError
from kvlab.util.files import number_in, shown
from kvlab.util.settings import Declared, setting
from kvlab.workloads import whole_number

__all__ = ["GENERATED_BLOCKS", "MAX_OUTPUT_TOKENS", "SCHEDULERS", "EngineSettings", "engine_setting_names"]

GENERATED_BLOCKS = ("keep", "drop")
SCHEDULERS = tuple(dict.fromkeys(engine.scheduler for engine in ENGINES.values() if engine.scheduler))
# The longest output a request may ask (--output-tokens), in tokens: a model's context holds prompt and output, and the
# longest context of any model is Llama 4 Scout's 10 million (meta-llama/Llama-4-Scout-17B-16E); the shipped models'
# reach 393,216 (models/Devstral-Small-2-24B-Instruct/config.json max_position_embeddings). The engine steps once per
# output token, so 10**8 ran for minutes, saying nothing (issue 36); 10**7 on one request takes seconds.
MAX_OUTPUT_TOKENS = 10**7


UTILIZATION = (1e-9, 1)  # --gpu-memory-utilization: a share of the GPU's memory


def _output_tokens(value):
    number = whole_number(1)(value)
    if number > MAX_OUTPUT_TOKENS:
        raise ValueError(
            f"expected a whole number <= {MAX_OUTPUT_TOKENS} (no model's context is longer), got {shown(value)}"
        )
    return number


@dataclass(frozen=True, kw_only=True)
class EngineSettings(Declared):
    """The scheduler's and the pool's settings (vLLM's flags of the same names where vLLM has one); the step's
    budget defaults are aisimulate's and vLLM's for online serving on large GPUs (``vllm/engine/arg_utils.py``
    ``_set_default_args``)."""

    scheduler: str = setting(
        "vllm",
        choices=SCHEDULERS,
        help="vllm: vLLM v1's (mixed steps, the newest running request preempted; default); sglang: SGLang's"
        " (prefill steps first, decode reserved at admission, the fewest-output request retracted)",
    )
    gpu_blocks: int | None = setting(
        None,
        convert=whole_number(0),
        help="the GPU pool in blocks (default: the engine's memory rule for the model and system,"
        " kvlab/serving/vllm.py; or --gpu-tokens)",
    )
    cpu_blocks: int | None = setting(
        None, convert=whole_number(0), help="the CPU tier in blocks (or --cpu-tokens; default none)"
    )
    max_num_batched_tokens: int = setting(
        8192, convert=whole_number(1), help="a step's token budget (vLLM's flag; default %(default)s)"
    )
    max_num_seqs: int = setting(
        256, convert=whole_number(1), help="the most requests in a step (vLLM's flag; default %(default)s)"
    )
    chunked_prefill: bool = setting(
        True,
        switch="both",
        help="cut a prompt longer than the budget left into chunks (default: on, as vLLM v1)",
    )
    generated_blocks: str = setting(
        "keep",
        choices=GENERATED_BLOCKS,
        help="keep: a request's full generated blocks stay cached when it lets go (vLLM hashes every full block);"
        " drop: freed empty, as the sequential replay (default %(default)s)",
    )
    output_tokens: int | None = setting(
        None,
        convert=_output_tokens,
        help="every request's output length (default: the trace's output_length; at most"
        f" {MAX_OUTPUT_TOKENS:,}, kvlab/simulator/settings.py)",
    )
    gpu_memory_utilization: float = setting(
        0.9,
        convert=number_in(*UTILIZATION, f"a number from {UTILIZATION[0]:g} to {UTILIZATION[1]:g}"),
        help="the share of GPU memory the engine takes (vLLM's flag; default %(default)s)",
    )

    def check_sequence(self, number, tokens, output):
        """SettingError when request ``number`` (from 1), ``tokens`` of prompt and ``output`` tokens, is longer at its
        longest (recomputed after a preemption) than a step's budget while chunked prefill is off: no step could ever
        compute it. vLLM refuses such a budget at start (``vllm/config/scheduler.py``
        ``SchedulerConfig.verify_max_model_len``: max_num_batched_tokens below max_model_len without chunked
        prefill); a trace's lengths are known as it is read, so here the first such request stops the run. A prompt
        of no tokens stops it too (KvlabError: vLLM refuses an empty prompt, and no step could price it)."""
        if tokens < 1:
            raise KvlabError(f"request {number}: its prompt is empty (input length 0), which vLLM refuses")
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
