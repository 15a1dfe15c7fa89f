"""The schedulers of the one event loop (``kvlab/simulator/events.py``), one class each behind :class:`Scheduler`,
chosen by ``--scheduler`` (the serving engines' ``scheduler``, ``kvlab/serving/``): each forms a step's batch and
decides who joins and who is preempted; the loop owns the clock, the queues, the pool and the copies. vidur's
``scheduler/`` and BLIS's batch formation are the model."""

__all__ = ["SCHEDULERS", "SGLangScheduler", "Scheduler", "VLLMScheduler"]

NEW_TOKEN_RATIO = (0.7, 0.1)  # SGLang's init_new_token_ratio and min_new_token_ratio (global_config.py)
NEW_TOKEN_RATIO_DECAY = 0.001  # SGLang's new_token_ratio_decay, a decode step
CLIP_MAX_NEW_TOKENS = 4096  # SGLang's cap on the output a request reserves (schedule_policy.py, its env default)
RETRACT_DECODE_STEPS = 20  # SGLang's SGLANG_RETRACT_DECODE_STEPS: the decode steps a retraction leaves room for


class Scheduler:
    """A step's batch over the loop ``sim`` (:class:`kvlab.simulator.events.Simulator`)."""

    def __init__(self, sim):
        self.sim = sim

    def step(self):
        """Schedule and run one step (or a run of decode steps at one price), or wait for the next event."""
        raise NotImplementedError


class VLLMScheduler(Scheduler):
    """vLLM v1's (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``): each step has a budget of
    ``max_num_batched_tokens``; the running requests come first, in order, each taking what it still needs (its prompt
    in chunks, then one token per step); when a running request's next blocks do not fit, the newest running request
    is preempted (its blocks freed, its tokens recomputed later; ``self.running.pop()``) until they do; then, if
    nothing was preempted, waiting requests join in arrival order while the budget and ``max_num_seqs`` allow (a
    preempted request waits at the front), from 0.24 only where their whole sequence fits (:meth:`admits`)."""

    def step(self):
        sim = self.sim
        budget = sim.settings.max_num_batched_tokens
        scheduled = []  # (request, tokens this step)
        preempted = False
        running, evicting = sim.running, sim.evicting
        index = 0
        while index < len(running) and budget > 0:
            request = running[index]
            tokens = min(request.length - request.computed, budget)
            while not sim.allocate(request, request.computed + tokens):
                victim = running.pop()
                sim.preempt(victim)
                preempted = True
                if victim is request:
                    break
            else:
                if evicting:
                    sim.write_back()
                scheduled.append((request, tokens))
                budget -= tokens
                index += 1
                continue
            break
        if not preempted:
            budget = sim.schedule_waiting(scheduled, budget, self.admits)
        if not scheduled:
            if preempted:
                return  # what it freed lets the next try schedule
            sim.wait()
            return
        sim.execute(scheduled, preempted)

    def admits(self, request, found):
        """vLLM's admission from 0.24 (``scheduler_reserve_full_isl``; ``KVCacheManager.allocate_slots`` with
        ``full_sequence_must_fit``, ``vllm/v1/core/kv_cache_manager.py:531``; ``get_num_blocks_to_allocate``,
        ``single_type_kv_cache_manager.py:176``): the blocks its whole sequence so far takes beyond what it holds fit
        in the free ones, a hit on a free cached block counted as taken (it leaves the free queue); before 0.24 any
        request whose chunk's blocks fit."""
        sim = self.sim
        if not sim.rules.full_sequence_admission:
            return True
        whole = -(-request.length // sim.block)
        if found is None:  # it holds its blocks (a load completed): only the new ones count
            return whole - len(request.held) - request.anonymous <= sim.pool.available
        keys, gpu_end, _ = found
        return sim.pool.needed(keys[:gpu_end], whole - gpu_end) <= sim.pool.available


class SGLangScheduler(Scheduler):
    """SGLang's (``python/sglang/srt/managers/scheduler.py`` ``get_next_batch_to_run``, ``schedule_policy.py``
    ``PrefillAdder``): a step is a prefill batch whenever one can run (the chunked request's next chunk first, then
    waiting requests in order while the budget, ``max_num_seqs`` and the pool less every running request's reserved
    decode tokens allow: ``new_token_ratio`` x its output still to come), else one decode step of every running
    request; prefills and decodes never share a step (SGLang's default, no ``--enable-mixed-chunk``). When a decode
    step's blocks do not fit, the running request with the fewest output tokens (the longest prompt among them) is
    retracted to the back of the queue (``retract_decode``) and the ratio becomes what the rest have decoded, plus
    ``RETRACT_DECODE_STEPS`` each, over their outputs (``estimate_new_token_ratio_after_retract``); it decays by
    ``NEW_TOKEN_RATIO_DECAY`` a decode step to its floor."""

    def __init__(self, sim):
        super().__init__(sim)
        self.new_token_ratio = NEW_TOKEN_RATIO[0]  # the share of a running request's output reserved
        self.reserve = 0  # the blocks the running requests' decodes reserve, this step

    def step(self):
        sim = self.sim
        budget = sim.settings.max_num_batched_tokens
        running, block = sim.running, sim.block
        scheduled = []
        for request in running:
            if budget > 0 and not request.decoding():  # a chunked prefill goes on first
                tokens = min(request.length - request.computed, budget)
                if sim.allocate(request, request.computed + tokens):
                    if sim.evicting:
                        sim.write_back()
                    scheduled.append((request, tokens))
                    budget -= tokens
        ahead = sum(min(r.output - r.generated, CLIP_MAX_NEW_TOKENS) for r in running)
        self.reserve = -(-int(self.new_token_ratio * ahead) // block)
        sim.schedule_waiting(scheduled, budget, self.admits)
        if scheduled:
            sim.execute(scheduled, False)
            return
        decoding = [request for request in running if request.decoding()]
        if not decoding:
            sim.wait()
            return
        retracted = False
        while decoding and self._decode_blocks(decoding) > sim.pool.available:
            victim = min(decoding, key=lambda request: (request.generated, -request.tokens, -request.number))
            decoding.remove(victim)
            running.remove(victim)
            sim.preempt(victim, front=False)
            retracted = True
        if retracted:  # SGLang's estimate_new_token_ratio_after_retract over the requests that go on decoding
            decoded = sum(request.generated for request in decoding) + RETRACT_DECODE_STEPS * len(decoding)
            outputs = sum(request.output for request in decoding)
            self.new_token_ratio = min(1.0, decoded / (outputs + 1)) if decoding else NEW_TOKEN_RATIO[0]
        for request in decoding:
            sim.allocate(request, request.computed + 1)
        if sim.evicting:
            sim.write_back()
        if decoding:
            steps = sim.execute([(request, 1) for request in decoding], retracted)
            self.new_token_ratio = max(NEW_TOKEN_RATIO[1], self.new_token_ratio - NEW_TOKEN_RATIO_DECAY * steps)

    def _decode_blocks(self, decoding):
        """The blocks one decode step of ``decoding`` takes beyond what they hold."""
        block = self.sim.block
        return sum(
            1 for request in decoding if -(-(request.computed + 1) // block) > len(request.held) + request.anonymous
        )

    def admits(self, request, found):
        """SGLang's admission (``PrefillAdder.add_one_req``, ``_select_prefill_admission``): the blocks the whole
        request takes beyond what it holds (a loaded prefix; a cached one counts on both sides), its whole prompt and
        its output but the last token, which is never stored (capped at ``CLIP_MAX_NEW_TOKENS``), fit in the pool
        less the running requests' reserve, even when only a chunk of it runs now. SGLang's page of overhead a
        request is left out, so that a request as long as the pool is served; a chunk that goes on
        (``add_chunked_req``) only has to fit."""
        sim = self.sim
        ahead = min(request.output - request.generated - 1, CLIP_MAX_NEW_TOKENS)
        more = -(-(request.length + ahead) // sim.block) - len(request.held) - request.anonymous
        return more <= sim.pool.available - self.reserve


SCHEDULERS = {"vllm": VLLMScheduler, "sglang": SGLangScheduler}
