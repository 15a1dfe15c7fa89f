"""``round-robin``: each request to the next instance in turn, whatever it holds (aisimulate's engine stack; llm-d's
``random`` baseline spreads the same way on average)."""

from kvlab.fleet.routers.base import Router


class RoundRobin(Router):
    name = "round-robin"

    def __init__(self):
        self.turn = -1

    def choose(self, keys, fleet):
        self.turn = (self.turn + 1) % len(fleet.caches)
        return self.turn


ROUTER = RoundRobin
