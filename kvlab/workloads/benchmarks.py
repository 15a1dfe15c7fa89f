"""Two serving benchmarks' workloads as kvlab replays them: who sends which prompt, in which order, at which step.

``bench_multiturn`` is SGLang's ``benchmark/hicache/bench_multiturn.py`` (sgl-project/sglang at commit 0986bed8e279,
PR #20457, read from the mirror hzh0425/sglang at 16c3533f68b6); ``multi_round_qa`` is LMCache's
``benchmarks/multi_round_qa/multi-round-qa.py`` (LMCache/LMCache at commit 2cdc3a84679f). Both keep a conversation per
client or user that only grows by appending, so a request is the conversation's context so far: a block's key names
the prefix it closes, and a prefix of a conversation is the same in each of its later turns. docs/workloads.md says
what each models and what it leaves out.

The sources' options and hooks are in ``kvlab/workloads/__init__.py``, which imports this module: here is only the
benchmarks' logic, on the standard library, so that nothing here imports the package back.
"""

import heapq
import math
from collections import Counter, deque
from fractions import Fraction
from typing import NamedTuple

__all__ = [
    "STEP",
    "Growth",
    "QASessions",
    "Session",
    "Turn",
    "block_keys",
    "floor_sum",
    "multiturn_order",
    "multiturn_rounds",
]

STEP = Fraction(1, 10)  # multi-round-qa.py's main(): manager.step(time.time()), then time.sleep(step_interval = 0.1)


class Turn(NamedTuple):
    """One request: the ``turn``-th (from 0) of ``conversation`` (from 0), sent at ``step`` (0 without a clock)."""

    turn: int
    conversation: int
    step: int = 0


class Growth(NamedTuple):
    """A conversation's prompts: turn ``k``'s is ``first + k * step`` tokens (each turn appends an output and a new
    question to the context)."""

    first: int
    step: int

    def tokens(self, turn):
        return self.first + turn * self.step

    def sum_tokens(self, turns):
        """The tokens of a conversation's first ``turns`` prompts."""
        return turns * self.first + self.step * turns * (turns - 1) // 2

    def sum_blocks(self, turns, block):
        """The blocks of a conversation's first ``turns`` prompts: the sum of ``ceil(tokens / block)``, in O(log)."""
        return floor_sum(turns, block, self.step, self.first + block - 1)


def floor_sum(n, m, a, b):
    """``sum(floor((a * i + b) / m) for i in range(n))`` for ``n >= 0``, ``m >= 1``, ``a, b >= 0`` (the AtCoder
    Library's floor_sum: Euclid's steps on the lattice points under a line)."""
    total = 0
    while True:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        highest = a * n + b
        if highest < m:
            return total
        n, b, m, a = highest // m, highest % m, a, m


def block_keys(conversation, tokens, block, shared, span):
    """The keys of a prompt of ``tokens`` tokens of ``conversation``: a block's key is the prefix it ends, ``(owner,
    end)`` as one int ``owner * span + end`` (``span`` past any prompt's length): owner 0, every conversation's, while
    the prefix lies in the ``shared`` tokens all conversations begin with, else ``conversation + 1``. A conversation
    only appends, so a block keeps its key in every later turn, and a partial last block (an end no later prompt cuts
    a block at) is never another's."""
    own = (conversation + 1) * span
    ends = list(range(block, tokens + 1, block))
    if tokens % block:
        ends.append(tokens)
    return [end if end <= shared else own + end for end in ends]


# ------------------------------------------------------------------------------------------------ bench_multiturn


def multiturn_rounds(clients, low, high, rng):
    """Each client's rounds: ``WorkloadGenerator.__init__`` draws ``random.randint(min_rounds, max_rounds)`` per client
    only when they differ ("skip randint to preserve random state"), before anything else draws."""
    if low == high:
        return [low] * clients
    return [rng.randint(low, high) for _ in range(clients)]


def multiturn_order(totals, policy, max_parallel, barrier, rng):
    """Yield each request as a :class:`Turn`, in the order ``request_sender`` pops them off the ReadyQueue.

    The queue starts with every client's first request in client order; each pop under ``random`` is
    ``random.randrange(len(queue))`` and is followed by one draw for the sender's sleep (``expovariate`` and
    ``uniform`` draw one ``random()`` each), all from the benchmark's one seeded ``random``; ``fifo`` pops the head.
    ``response_handler`` appends a client's next request when its response comes back, or with the round barrier
    holds them until the round's last response and then appends them in the order they came back. Here responses come
    back in the order the requests went out, and the sender sends whenever fewer than ``max_parallel`` are out (a
    saturated sender); the sleeps the sender draws while it waits on an empty queue depend on the server's speed and
    are not drawn. So the first round is the benchmark's own order for its seed (with ``--disable-random-sample``,
    where no dataset shuffle draws first), later rounds are the same rule carried on, and with the barrier
    ``max_parallel`` changes nothing.
    """
    clients = len(totals)
    queue = list(range(clients))
    done = [0] * clients
    flying = deque()
    held = []
    ending, alive, waiting = Counter(totals), clients, []  # waiting: clients_per_round, the barrier's counts
    for turn in range(max(totals, default=0)):
        alive -= ending[turn]
        waiting.append(alive)
    barrier_round = completed = 0
    while queue or flying:
        if queue and len(flying) < max_parallel:
            client = queue.pop(rng.randrange(len(queue)) if policy == "random" else 0)
            rng.random()  # the sleep drawn after a pop
            yield Turn(done[client], client)
            flying.append(client)
            continue
        client = flying.popleft()
        done[client] += 1
        if done[client] < totals[client]:
            (held if barrier else queue).append(client)
        if barrier and barrier_round < len(waiting):
            completed += 1
            if completed == waiting[barrier_round]:
                queue += held
                held, barrier_round, completed = [], barrier_round + 1, 0


# ------------------------------------------------------------------------------------------------- multi_round_qa


def steps_past(seconds):
    """The fewest steps of 0.1 s that are more than ``seconds`` (the benchmark's ``timestamp - last > gap``)."""
    return math.floor(Fraction(seconds) / STEP) + 1


class Session(NamedTuple):
    """One user's session: the step of its first request and its requests."""

    first: int
    count: int


class QASessions:
    """multi-round-qa.py's users on an exact clock of 0.1-s steps, each response back before the user's next
    request is due (as its ``--dry-run`` answers at once).

    ``UserSessionManager.__init__``: a user's requests are ``gap = num_users / qps`` seconds apart, a session lasts
    ``rounds - 1`` gaps and a new user joins every ``session_alive_time / num_users`` seconds, so ``num_users``
    sessions overlap. ``_ramp_up`` (at the first step) makes ``num_users`` sessions already under way: user ``i`` is
    ``offset = num_users * between - i * between`` seconds into its session (``set_internal_state``), has passed
    ``int(offset / gap) + 1`` questions (with no history: its first prompt is the system prompt and a question as a
    new user's) and sends the rest from the step where ``timestamp - last_request_time > gap``. A new user joins at
    the first step and then whenever ``timestamp - last_user_join > gap_between_users``, and asks at once. The float
    arithmetic is the benchmark's.
    """

    def __init__(self, users, rounds, qps):
        gap = users / qps
        session_alive_time = gap * (rounds - 1)
        between = session_alive_time / (users + 0)
        if not math.isfinite(between):
            raise ValueError(f"{qps} requests per second of {users} users make a session of {rounds} rounds too long")
        self.rounds, self.every, self.join_every = rounds, steps_past(gap), steps_past(between)
        ramp_up_time = users * between
        self.ramp = []
        for index in range(users):
            offset = ramp_up_time - index * between
            if offset < 0:  # created but never set: it starts as a new user does
                self.ramp.append(Session(0, rounds))
                break
            passed = int(offset / gap) + 1
            wait = Fraction(gap) + Fraction((passed - 1) * gap) - Fraction(offset)  # from the first step
            self.ramp.append(Session(0 if wait < 0 else math.floor(wait / STEP) + 1, max(rounds - passed, 0)))

    def sent(self, session, last):
        """The requests ``session`` sends by step ``last``."""
        return 0 if session.first > last else min(session.count, (last - session.first) // self.every + 1)

    def sessions(self, last):
        """The sessions made by step ``last``: the ramp-up's and the new users'."""
        return len(self.ramp) + last // self.join_every + 1

    def counts(self, last):
        """``{requests a session sends: sessions that send that many}`` by step ``last`` (the new users that joined
        early enough to finish in one lump, the rest one by one)."""
        counts = Counter(self.sent(session, last) for session in self.ramp)
        joined = last // self.join_every + 1
        lasting = (self.rounds - 1) * self.every
        finished = 0 if last < lasting else min(joined, (last - lasting) // self.join_every + 1)
        counts[self.rounds] += finished
        for number in range(finished, joined):
            counts[self.sent(Session(number * self.join_every, self.rounds), last)] += 1
        return counts

    def schedule(self, last):
        """Yield each request sent by step ``last`` as a :class:`Turn`, in the benchmark's order: by step, and within
        a step in the order the sessions were made (``UserSessionManager.step`` steps ``self.sessions`` in order: the
        ramp-up's, then new users as they joined)."""
        due = [(session.first, index, 0) for index, session in enumerate(self.ramp) if self.sent(session, last)]
        counts = [session.count for session in self.ramp]
        heapq.heapify(due)
        joining = 0
        while True:
            join_step = joining * self.join_every
            if join_step <= last and not (due and due[0][0] <= join_step):  # sessions made before it go first
                heapq.heappush(due, (join_step, len(counts), 0))
                counts.append(self.rounds)
                joining += 1
                continue
            if not due:
                return
            step, index, turn = heapq.heappop(due)
            yield Turn(turn, index, step)
            if turn + 1 < counts[index] and step + self.every <= last:
                heapq.heappush(due, (step + self.every, index, turn + 1))
