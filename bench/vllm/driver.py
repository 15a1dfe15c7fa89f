"""vLLM 0.33's own scheduler, KV cache manager and block pool (and, with --cpu-blocks, its OffloadingConnector's
scheduler side with the CPU backend's LRU manager), driven by a mock model runner, on requests kvlab wrote.

Runs in the bench's own venv (``make bench-vllm``: vllm==0.33.0 with PyTorch's CPU build, VLLM_TARGET_DEVICE=cpu),
never in kvlab's: it reads the requests as JSON lines (``{"keys": [...], "tokens": n, "output": m}``, the full
prompt blocks' keys as kvlab reads them) and writes one JSON line per request (its number, the tokens its first
scheduled lookup found on the GPU and on the CPU, its preemptions) and a last line with the run's steps.

The scheduler is built the way vLLM's tests build one (``tests/v1/core/utils.py`` ``create_scheduler``): a
``VllmConfig`` of a model config read from a folder (a one-layer config.json, no weights, no tokenizer), a
``KVCacheConfig`` of ``--gpu-blocks`` blocks of one full-attention group. The mock model runner samples one token
for every request whose scheduled tokens reach its end (a prefill chunk samples none), as the GPU model runner does.

Tokens: a prompt block of key k is ``[k, 0, ..., 0]`` (vLLM chains each block's hash to its parent's, as kvlab's keys
are chained); a prompt's partial tail and every generated token are the request's own token, so that no other
request finds them.

Arrivals: ``--clients`` closed-loop clients (1: one request at a time; as many as the requests: a burst), each
sending the next request of the file when its last finishes, before the next step, as ``kvlab simulate --clients``.
"""

import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

PAGE = 4096  # bytes of KV a block holds here (mmap.PAGESIZE on x86-64 and aarch64 Linux)
OWN = 10**15  # a request's own token is OWN + its number: above every key


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", required=True, help="JSON lines written by bench/vllm_side_by_side.py")
    parser.add_argument("--out", required=True, help="the per-request JSON lines to write")
    parser.add_argument(
        "--gpu-blocks", type=int, required=True, help="vLLM's num_gpu_blocks (block 0 is its null block)"
    )
    parser.add_argument("--cpu-blocks", type=int, default=0, help="the OffloadingConnector's CPU blocks (0: none)")
    parser.add_argument("--block-tokens", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--clients", type=int, required=True)
    return parser.parse_args(argv)


def model_folder(folder):
    """``folder`` with a model config vLLM's ModelConfig reads without a download: one small Llama layer (no weights
    are loaded)."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 1,
        "vocab_size": 32000,
        "max_position_embeddings": 1 << 20,
        "torch_dtype": "float16",
    }
    with open(os.path.join(folder, "config.json"), "w") as file:
        json.dump(config, file)
    return folder


def scheduler(args, folder):
    import torch
    from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    length = 1 << 20
    block = args.block_tokens
    scheduler_config = SchedulerConfig(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=length,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
    )
    model_config = ModelConfig(
        model=model_folder(folder), skip_tokenizer_init=True, dtype="float16", seed=0, max_model_len=length
    )
    cache_config = CacheConfig(block_size=block, enable_prefix_caching=True)
    transfer = None
    if args.cpu_blocks:
        transfer = KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config={"cpu_bytes_to_use": args.cpu_blocks * PAGE, "block_size": block},
        )
    config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        kv_transfer_config=transfer,
    )
    # A block's page of PAGE bytes (K and V of one head of block * 8 / block float32s), a multiple of the memory
    # page the CPU backend aligns a block to (vllm/v1/kv_offload/cpu/spec.py), so cpu_bytes_to_use is blocks x PAGE.
    spec = FullAttentionSpec(block_size=block, num_kv_heads=1, head_size=PAGE // (8 * block), dtype=torch.float32)
    kv_cache_config = KVCacheConfig(
        num_blocks=args.gpu_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)]
    )
    cache_config.num_gpu_blocks = args.gpu_blocks
    engine = Scheduler(
        vllm_config=config,
        kv_cache_config=kv_cache_config,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(config),
        block_size=block,
    )
    if args.cpu_blocks:  # the CPU backend's own count of the blocks it holds (vllm/v1/kv_offload/cpu/spec.py)
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import build_offloading_config
        from vllm.v1.kv_offload.factory import OffloadingSpecFactory

        spec = OffloadingSpecFactory.create_spec(build_offloading_config(config, kv_cache_config))
        if spec.num_chunks != args.cpu_blocks:
            sys.exit(f"the CPU backend holds {spec.num_chunks} blocks, not --cpu-blocks {args.cpu_blocks}")
    return engine


def connector_output(output):
    """The mock connector worker: every load and store the scheduler's connector asked for in this step completes
    in it (OffloadingConnectorWorker's report: each job's id in completed_jobs, an async load's request in
    finished_recving; worker.py get_finished, build_connector_worker_meta)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
    from vllm.v1.outputs import KVConnectorOutput

    meta = output.kv_connector_metadata
    if meta is None:
        return None
    done = OffloadingWorkerMetadata()
    received = set()
    for job_id, job in meta.load_jobs.items():
        done.mark_completed(job_id)
        if not job.sync:
            received.add(job.req_id)
    for job_id in meta.store_jobs:
        done.mark_completed(job_id)
    for job_id in meta.jobs_to_flush or ():
        done.mark_completed(job_id)
    return KVConnectorOutput(finished_recving=received, kv_connector_worker_meta=done if done.completed_jobs else None)


def make_request(number, entry, block):
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    global HASHER
    if HASHER is None:
        from vllm.utils.hashing import sha256_cbor

        init_none_hash(sha256_cbor)
        HASHER = get_request_block_hasher(block, sha256_cbor)
    tokens = []
    for key in entry["keys"]:
        tokens += [key] + [0] * (block - 1)
    tokens += [OWN + number] * (entry["tokens"] - len(tokens))
    params = SamplingParams(ignore_eos=True, max_tokens=entry["output"])
    return Request(
        request_id=str(number),
        prompt_token_ids=tokens,
        sampling_params=params,
        pooling_params=None,
        arrival_time=float(number),
        block_hasher=HASHER,
    )


HASHER = None


def run(args):
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import RequestStatus

    with open(args.requests) as file:
        entries = [json.loads(line) for line in file]
    with tempfile.TemporaryDirectory(prefix="kvlab-vllm-") as folder:
        engine = scheduler(args, folder)
    block = args.block_tokens
    pending = iter(enumerate(entries))
    live = {}
    rows = {}
    steps = 0

    def issue():
        item = next(pending, None)
        if item is not None:
            number, entry = item
            request = make_request(number, entry, block)
            live[request.request_id] = request
            engine.add_request(request)

    for _ in range(args.clients):
        issue()
    while live:
        output = engine.schedule()
        for request_id, request in live.items():
            if request_id not in rows and request.status != RequestStatus.WAITING and request.prefill_stats:
                stats = request.prefill_stats
                rows[request_id] = [stats.num_local_cached_tokens, stats.num_external_cached_tokens]
        if output.total_num_scheduled_tokens:
            steps += 1

        ids = list(output.num_scheduled_tokens)
        sampled = []
        for request_id in ids:
            request = live[request_id]
            sampled.append([] if request.num_computed_tokens < request.num_tokens else [OWN + int(request_id)])
        result = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={request_id: index for index, request_id in enumerate(ids)},
            sampled_token_ids=sampled,
            kv_connector_output=connector_output(output),
        )
        engine.update_from_output(output, result)
        if not output.total_num_scheduled_tokens and not ids:
            stuck = sum(1 for request in live.values() if request.status == RequestStatus.WAITING)
            if stuck == len(live):
                sys.exit(f"vLLM scheduled nothing with {len(live)} requests waiting")
        for request_id in ids:
            request = live[request_id]
            if request.is_finished():
                rows[request_id].append(request.num_preemptions)
                del live[request_id]
                issue()
    with open(args.out, "w") as file:
        for number in range(len(entries)):
            gpu, cpu, preemptions = rows[str(number)]
            file.write(
                json.dumps({"request": number, "gpu_hit": gpu, "cpu_hit": cpu, "preemptions": preemptions}) + "\n"
            )
        file.write(json.dumps({"steps": steps}) + "\n")


if __name__ == "__main__":
    run(parse(sys.argv[1:]))
