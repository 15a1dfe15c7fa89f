"""The engine: a GPU and a CPU tier of KV blocks (``prefix``), how the CPU tier is filled (``write_policies``),
and each tier's eviction policy (``eviction``)."""
