"""The cache: a GPU and a CPU tier of KV blocks (``prefix``), how the CPU tier is filled (``write_policies``),
and each tier's eviction policy (``eviction``); the compiled lab design (``compiled``), a server's own design
(``llama_cpp``); the interface every cache implements and the settings that build one (``interface``)."""
