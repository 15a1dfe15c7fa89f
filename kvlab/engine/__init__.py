"""The time-aware replay of one engine instance (``kvlab simulate``): arrivals (``arrivals.py``), the GPU's block pool
(``pool.py``), the step's price (``cost.py``), the engine's memory rule (``memory.py``), its settings
(``settings.py``) and the one event loop (``simulator.py``); and llama.cpp's llama-server under load
(``llama_server.py``: its slots, its prompt cache in RAM, its batching), which ``server/load_check.py`` holds to a real
one."""
