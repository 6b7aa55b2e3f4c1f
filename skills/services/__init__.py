"""Every write of procedural memory: definitions.py (skills and their versions),
lifecycle.py (promotion, deprecation, retirement), runs.py (validations and
executions in the sandbox, and executions the agent reports), traces.py (procedures the agent performed
without a skill: the evidence consolidation mines into candidate skills)."""
