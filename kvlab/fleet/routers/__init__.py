"""The routers that pick a request's instance without a clock (issue 39, part 1), one module each behind
:class:`kvlab.fleet.routers.base.Router`, in one registry."""

from kvlab.fleet.routers import prefix, round_robin, session
from kvlab.fleet.routers.base import Router

__all__ = ["ROUTERS", "Router"]

ROUTERS = {module.ROUTER.name: module.ROUTER for module in (round_robin, session, prefix)}
