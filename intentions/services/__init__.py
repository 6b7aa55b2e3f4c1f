"""Every write of working state and prospective memory: state.py (threads,
checkpoints, handover), lifecycle.py (an intention's life, as the API asks),
engine.py (the scans and cycles), dependencies.py (what an intention waits
for, and what its end does to its dependents), firing.py (an intention
becomes due), escalation.py, transitions.py (what every change writes),
triggers.py (trigger specs). Each module imports only those after it in this
list (pyproject.toml's import-linter contract)."""
