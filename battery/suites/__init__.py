"""Battery suites: one module per suite, each registering itself (see battery.registry)."""
