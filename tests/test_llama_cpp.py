"""kvlab's model of llama-cpp-python's server (kvlab/serving/llama_cpp.py) against an independent token-level model of
the server's code (a context of one prompt; a RAM cache of saved states found by longest common prefix), and the
server's behaviours the issue observed: the lab's cliff, the BOS touch, a reused document's two states, a state
larger than the room. The real server is checked by `make test-server` (server/check.py)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.loop import replay
from kvlab.serving.llama_cpp import LlamaCppServer
from kvlab.workloads import LabWorkload

BOS = -1


class TokenServer:
    """llama-cpp-python 0.3.16's completion path, token by token, written plainly."""

    def __init__(self, context_room, cache_room, bos):
        self.context_room, self.cache_room, self.bos = context_room, cache_room, bos
        self.context = []  # input ids in the context
        self.cache = []  # [tokens, size] oldest first (an OrderedDict's order)

    @staticmethod
    def prefix(a, b):
        count = 0
        while count < min(len(a), len(b)) and a[count] == b[count]:
            count += 1
        return count

    def complete(self, prompt, completion):
        """Serve one prompt; return the prompt tokens reused and from where ("context", "cache" or None)."""
        prompt = ([BOS] if self.bos else []) + prompt
        source = "context"
        if self.cache_room:
            lengths = [self.prefix(saved, prompt) for saved, _ in self.cache]
            best = max(lengths, default=0)
            if best > 0:
                entry = self.cache.pop(lengths.index(best))  # the first of the longest, refreshed
                self.cache.append(entry)
                if self.prefix(entry[0], prompt) > self.prefix(self.context, prompt):
                    self.context, source = list(entry[0]), "cache"
        reused = self.prefix(self.context, prompt[:-1])
        saved = prompt + completion
        self.context = saved if len(saved) <= self.context_room else []
        if self.cache_room:
            self.cache.append([saved, len(saved)])
            while sum(size for _, size in self.cache) > self.cache_room and self.cache:
                self.cache.pop(0)
        shared = reused - (1 if self.bos else 0)  # the BOS is no document's
        return (shared, source) if shared > 0 else (0, None)


@st.composite
def sessions(draw):
    """Documents (token lists, some sharing a leading part) and the order requests read them in."""
    docs = []
    for index in range(draw(st.integers(1, 5))):
        shared = []
        if docs and draw(st.booleans()):
            parent = draw(st.sampled_from(docs))
            shared = parent[: draw(st.integers(1, len(parent)))]
        own = [1000 * (index + 1) + k for k in range(draw(st.integers(0 if shared else 1, 6)))]
        docs.append(shared + own)
    order = draw(st.lists(st.integers(0, len(docs) - 1), min_size=1, max_size=25))
    return docs, order


@settings(max_examples=300, deadline=None)
@given(
    session=sessions(),
    question=st.integers(1, 3),
    completion=st.integers(0, 3),
    cache_room=st.integers(0, 60),
    context_room=st.integers(0, 20),
    bos=st.booleans(),
)
def test_the_model_serves_as_the_servers_code(session, question, completion, cache_room, context_room, bos):
    docs, order = session
    real = TokenServer(context_room, cache_room, bos)
    extra = question + completion + (1 if bos else 0)
    model = LlamaCppServer(context_room, cache_room, 1, state_extra_tokens=extra, bos=bos)
    for number, doc in enumerate(order):
        own = [-(100 * number + k) - 2 for k in range(question)]  # the request's own question
        reused, source = real.complete(docs[doc] + own, [-7] * completion)
        gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens = model.serve(docs[doc], len(docs[doc]))
        assert (gpu_tokens, cpu_tokens) == (reused if source == "context" else 0, reused if source == "cache" else 0)
        assert (gpu_blocks, cpu_blocks) == (gpu_tokens, cpu_tokens)
        assert len(model.states) == len(real.cache) and model.used == sum(size for _, size in real.cache)


def lab_hits(docs, rooms, bos=False, extra=10, tokens=100):
    """Per pass, the documents served from the context and from the RAM cache (lab passes fwd, fwd, rev)."""
    workload = LabWorkload(tokens, docs=docs, tokens=tokens, passes=["fwd", "fwd", "rev"])
    cache = LlamaCppServer(10 * tokens, rooms * (tokens + extra), tokens, extra, bos)
    return [(row[3], row[4]) for row in replay(workload, cache)]


def test_one_document_short_of_the_working_set_recomputes_the_second_pass():
    docs = 5
    assert lab_hits(docs, docs - 1)[1] == (0, 0)
    assert lab_hits(docs, 3 * docs)[1] == (0, docs)  # room to spare: every document from the RAM cache


def test_a_shared_bos_refreshes_the_oldest_state_and_breaks_the_cycle():
    """Prompts that all begin with the BOS token: a lookup that matches only the BOS still refreshes the oldest
    state, so the N+1 cycle keeps some documents (the issue saw 3 of 5) where without a BOS it keeps none."""
    without, with_bos = lab_hits(5, 4)[1], lab_hits(5, 4, bos=True)[1]
    assert without == (0, 0) and with_bos[1] > 0


def test_a_reused_document_holds_two_states_and_a_state_larger_than_the_room_empties_it():
    cache = LlamaCppServer(1000, 300, 100, state_extra_tokens=10)
    cache.serve(["a"], 100)
    cache.serve(["a"], 100)  # hits the first state, saves its own beside it
    assert len(cache.states) == 2 and cache.used == 220
    cache.serve(["b", "c", "d"], 300)  # 310 tokens: more than the room, the cache ends empty
    assert len(cache.states) == 0 and cache.used == 0
    assert cache.serve(["a"], 100) == (0, 0, 0, 0)
