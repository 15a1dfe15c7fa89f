"""The real routers a fleet's rule is pasted into, each with its command (or configuration) and the files it is read
from: llm-d's inference scheduler (its ``EndpointPickerConfig``), NVIDIA Dynamo's frontend, the SGLang router (SGLang
Model Gateway) and vLLM's production-stack router. Their flags change quickly (Dynamo's and smg's newest especially):
check them against the installed version's ``--help``."""

from kvlab.fleet.routers.base import Paste

__all__ = ["DYNAMO", "PRODUCTION_STACK", "SGLANG", "dynamo", "llm_d", "precise_prefix", "production_stack", "sglang"]

LLM_D_SOURCE = (
    "llm-d/llm-d-inference-scheduler 520af478 pkg/epp/config/loader/defaults.go, deploy/config/*.yaml"
    " (GIE v1.5.0 the same)"
)
DYNAMO = "python -m dynamo.frontend"
DYNAMO_SOURCE = "ai-dynamo/dynamo docs/components/router/router-configuration.md, router_args.py, kv_router_args.py"
SGLANG = "python -m sglang_router.launch_router --worker-urls URL ..."
SGLANG_SOURCE = "sgl-project/sglang sgl-model-gateway/bindings/python/src/sglang_router/router_args.py"
PRODUCTION_STACK = "vllm-router --service-discovery static --static-backends URL,..."
PRODUCTION_STACK_SOURCE = "vllm-project/production-stack src/vllm_router/parsers/parser.py, routers/routing_logic.py"


def llm_d(scorers, note="", producers=()):
    """llm-d's ``EndpointPickerConfig`` of one profile: ``scorers`` (``(plugin type, weight, parameters)``, parameters
    a YAML text or empty) and the max-score picker; ``producers`` (``(plugin type, parameters)``) are plugins outside
    the profile."""
    lines = ["apiVersion: inference.networking.x-k8s.io/v1alpha1  # llm-d after 0.8: llm-d.ai/v1alpha1"]
    lines += ["kind: EndpointPickerConfig", "plugins:"]
    for kind, _, parameters in [(kind, None, parameters) for kind, parameters in producers] + list(scorers):
        lines.append(f"- type: {kind}")
        if parameters:
            lines += ["  parameters:", *(f"    {line}" for line in parameters.splitlines())]
    lines += ["- type: max-score-picker", "schedulingProfiles:", "- name: default", "  plugins:"]
    for kind, weight, _ in scorers:
        lines += [f"  - pluginRef: {kind}", f"    weight: {weight:g}"]
    lines.append("  - pluginRef: max-score-picker")
    return Paste("llm-d inference scheduler (EndpointPickerConfig)", "\n".join(lines), LLM_D_SOURCE, note)


def precise_prefix(block_tokens):
    """llm-d's ``precise-prefix-cache-scorer``'s parameters: the engines' KV block (llm-d-kv-cache's tokens)."""
    return f"tokenProcessorConfig:\n  blockSize: {block_tokens}  # the engines' KV block"


def dynamo(flags, note=""):
    return Paste("NVIDIA Dynamo frontend", f"{DYNAMO} {flags}", DYNAMO_SOURCE, note)


def sglang(flags, note=""):
    return Paste("SGLang router (SGLang Model Gateway)", f"{SGLANG} {flags}", SGLANG_SOURCE, note)


def production_stack(flags, note=""):
    return Paste("vLLM production-stack router", f"{PRODUCTION_STACK} {flags}", PRODUCTION_STACK_SOURCE, note)
