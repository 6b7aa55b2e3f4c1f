"""Every write to semantic memory, by topic: assertion.py (a batch of claims),
corrections.py (retract, correct, end, settle a contest), entities.py,
predicates.py, authority.py (the agent's authority policy), rebuild.py (replay
of the ledger); common.py holds provenance and the append-and-apply every
write goes through. Each write validates completely, then appends its ledger
events and applies them to the projection (`facts/projection.py`) in one
transaction; writers of one (agent, subject, predicate) queue on an advisory
lock taken after the agent's chain, and a write that still meets a constraint
lost a race: it is run again (piper.transactions.run_write). Each module imports only those below it (pyproject.toml's
import-linter contract). Callers import from `facts.services`."""

from .assertion import ClaimInput, fact_assert, facts_assert
from .authority import authority_order_set
from .common import MAX_BATCH, MAX_NAME, MISSING, OPERATOR, EntityRef, Provenance
from .corrections import contest_resolve, fact_correct, fact_end, fact_retract
from .entities import entity_alias_add, entity_create
from .predicates import PREDICATE_NAME, clean_aliases, clean_examples, predicate_define
from .rebuild import rebuild_projection

__all__ = [
    "MAX_BATCH",
    "MAX_NAME",
    "MISSING",
    "OPERATOR",
    "PREDICATE_NAME",
    "ClaimInput",
    "EntityRef",
    "Provenance",
    "authority_order_set",
    "clean_aliases",
    "clean_examples",
    "contest_resolve",
    "entity_alias_add",
    "entity_create",
    "fact_assert",
    "fact_correct",
    "fact_end",
    "fact_retract",
    "facts_assert",
    "predicate_define",
    "rebuild_projection",
]
