"""Every write of procedural memory: definitions.py (skills and their versions),
lifecycle.py (promotion, deprecation, retirement), runs.py (validations and
executions in the sandbox, and executions the agent reports)."""
