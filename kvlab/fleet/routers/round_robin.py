"""``round-robin``: each request to the next instance in turn, whatever it holds (aisimulate's engine stack; llm-d's
``random`` baseline spreads the same way on average)."""

from kvlab.fleet.routers import products
from kvlab.fleet.routers.base import Router


class RoundRobin(Router):
    name = "round-robin"

    def __init__(self, settings=None):
        super().__init__(settings)
        self.turn = -1

    def choose(self, keys, tokens, fleet):
        self.turn = (self.turn + 1) % fleet.size
        return self.turn

    def paste(self, block_tokens):
        return [
            products.dynamo("--router-mode round-robin"),
            products.sglang("--policy round_robin"),
            products.production_stack("--routing-logic roundrobin"),
            products.llm_d(
                [], "no round-robin picker: with no scorer the max-score picker picks at random, the same on average"
            ),
        ]


ROUTER = RoundRobin
