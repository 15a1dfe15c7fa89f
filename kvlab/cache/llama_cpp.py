"""llama-cpp-python's server as a cache design: a context of one prompt, and a RAM cache of whole saved states.

Read from llama-cpp-python 0.3.16 (``llama_cpp/llama.py`` ``Llama._create_completion`` and ``Llama.generate``,
``llama_cpp/llama_cache.py`` ``LlamaRAMCache``), and checked request by request against the real server
(``server/check.py``):

* The context keeps the KV of the last prompt served (and its completion): a prompt that starts with part of
  it reuses that part (``generate``'s prefix match). Requests are served one at a time.
* With ``--cache true --cache_type ram`` an OrderedDict maps each saved prompt's tokens to its state. A lookup
  takes the key with the longest common prefix with the prompt (the first, oldest, among equals; none when no
  key shares the first token) and moves it to the newest end, whether or not it is then used: it is loaded
  only if it shares more than the context does. So when every prompt starts with the same BOS token, a lookup
  that matches only the BOS still refreshes the oldest entry (``bos``).
* After the completion the state of prompt and completion is saved under a new key (the one it hit stays: a
  reused document can hold two states), added at the newest end; then the oldest states are dropped while the
  states' bytes exceed the room, the new one included: a state larger than the room empties the cache.

A request of the workload is the prompt's shared part (the document); a saved state also holds
``state_extra_tokens`` more (the request's own question and completion, and the state's fixed bytes in tokens
of KV), which no later prompt shares. Rooms are in tokens of KV: the GPU's is the context's (a prompt longer is
not kept), the CPU's the RAM cache's. Hits are in tokens and in whole blocks of the request.
"""

from collections import OrderedDict

__all__ = ["SERVERS", "LlamaCppServer"]

SERVERS = ("llama-cpp",)  # the servers whose own design kvlab models (replay --server, ttft fit --server)


class LlamaCppServer:
    """The server's two tiers over a workload's requests (block keys, tokens): a
    :class:`kvlab.cache.interface.Engine`."""

    name = "llama-cpp"
    offline = False

    def __init__(self, gpu_tokens, cpu_tokens, block_tokens, state_extra_tokens=0, bos=False):
        rooms = {"gpu_tokens": gpu_tokens, "cpu_tokens": cpu_tokens, "state_extra_tokens": state_extra_tokens}
        for name, value in rooms.items():
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens!r}")
        self.gpu_tokens, self.cpu_tokens, self.block_tokens = gpu_tokens, cpu_tokens, block_tokens
        self.extra, self.bos = state_extra_tokens, bos
        self.context = ()  # the keys of the prompt in the context
        self.states = OrderedDict()  # number of the request that saved it -> (its keys, its size in tokens)
        self.used = 0
        self._served = 0

    def shared(self, keys, other):
        """Blocks ``keys`` and ``other`` share from the start."""
        count = 0
        for mine, theirs in zip(keys, other, strict=False):
            if mine != theirs:
                break
            count += 1
        return count

    def lookup(self, keys):
        """The RAM cache's lookup: the blocks its best state shares (that state refreshed), or 0."""
        bos = 1 if self.bos else 0  # with a BOS every state shares the prompt's first token
        best, found = 0, None
        for number, (saved, _size) in self.states.items():
            length = bos + self.shared(keys, saved)
            if length > best:  # the first of the longest, as LlamaRAMCache._find_longest_prefix_key
                best, found = length, number
        if found is None:
            return 0
        self.states.move_to_end(found)
        return best - bos

    def foresee(self, columns):
        """Nothing to learn: the server's design needs no future."""

    def serve(self, keys, tokens):
        """Serve one request; return ``(gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens)`` it reused."""
        keys = tuple(keys)
        in_context = self.shared(keys, self.context)
        in_cache = self.lookup(keys) if self.cpu_tokens else 0
        gpu_blocks = cpu_blocks = 0
        if in_cache > in_context:
            cpu_blocks = in_cache
        else:
            gpu_blocks = in_context
        size = tokens + self.extra
        self.context = keys if size <= self.gpu_tokens else ()
        if self.cpu_tokens:
            self.states[self._served] = (keys, size)
            self.used += size
            while self.used > self.cpu_tokens and self.states:
                self.used -= self.states.popitem(last=False)[1][1]
        self._served += 1
        block = self.block_tokens
        return gpu_blocks, cpu_blocks, min(gpu_blocks * block, tokens), min(cpu_blocks * block, tokens)

    def __repr__(self):
        return f"LlamaCppServer(context={len(self.context)} blocks, states={len(self.states)}, used={self.used})"
