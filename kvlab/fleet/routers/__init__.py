"""The routers that pick a request's instance, one module each behind :class:`kvlab.fleet.routers.base.Router`, in
one registry: those that need no clock (issue 39, part 1; every fleet command takes them) and those that read the
instances' load (``clock``: ``kvlab simulate`` only)."""

from kvlab.fleet.routers import dynamo, least_loaded, llm_d, prefix, round_robin, session, sglang
from kvlab.fleet.routers.base import Router

__all__ = ["CLOCKLESS", "ROUTERS", "Router"]

ROUTERS = {
    module.ROUTER.name: module.ROUTER for module in (round_robin, session, prefix, least_loaded, llm_d, dynamo, sglang)
}
CLOCKLESS = tuple(name for name, router in ROUTERS.items() if not router.clock)
