"""kvlab: a reproducible lab, and a planning tool, for KV-cache offloading in LLM serving.

The three lab scripts (``kvsim``, ``scenario``, ``summarize``) are standard-library only and
also work when copied alone; the other modules are the pipeline's code.
"""
