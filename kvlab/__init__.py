"""kvlab: a reproducible lab, and a planning tool, for KV-cache offloading in LLM serving.

The three lab scripts (``kvsim``, ``scenario``, ``summarize``) are standard-library only and also work when
copied alone. The domain is grouped by concern (``cache``, ``workloads``, ``replay``, ``curves``, ``sizing``,
``latency``, ``measure``, ``report``); ``cli`` is every command (``kvlab COMMAND``), the only layer that parses
arguments; ``config``, ``pipeline``, ``runs`` and ``freshness`` serve the Snakemake workflow.
"""
