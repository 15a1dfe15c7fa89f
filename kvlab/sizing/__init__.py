"""From tokens to memory: a model's KV bytes per token (``model_size``) and CPU budgets (``plan``)."""
