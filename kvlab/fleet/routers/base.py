"""What every router shares: :class:`Router`, and the least-used rule that breaks ties."""

__all__ = ["Router", "least_used"]


class Router:
    """Picks the instance that serves a request: :meth:`choose` returns its index. A router sees the request's block
    keys and the fleet (its instances' tiers, and what each served so far)."""

    name = ""

    def choose(self, keys, fleet):
        raise NotImplementedError


def least_used(candidates, fleet):
    """Of ``candidates`` (instance indexes), the one sent the fewest requests so far, the first among equals."""
    return min(candidates, key=lambda index: (fleet.counts[index][0], index))
