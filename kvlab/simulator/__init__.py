"""The simulator: the time-aware replay of one engine instance (``kvlab simulate``): arrivals (``arrivals.py``), the
GPU's block pool (``pool.py``), the step's price (``cost.py``), vLLM 0.33's CPU tier (``offloading.py``), its settings
(``settings.py``) and the one event loop (``events.py``, compiled in ``kernel.py``, driven by ``compiled.py``). What
each serving engine does (its pool rule, its scheduler's rules by version) is in ``kvlab/serving/``."""
