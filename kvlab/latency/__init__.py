"""From hits to time: the per-tier TTFT model (``model``), fitted to a measurement and priced (``ttft``)."""
