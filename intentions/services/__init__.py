"""Every write of working state and prospective memory: state.py (threads,
checkpoints, handover), lifecycle.py (an intention's life), engine.py (what
makes intentions due), triggers.py (trigger specs)."""
