"""The failure taxonomy (DESIGN.md §9): every failed item says where memory broke.

The retrieval codes follow the path of a lookup: the need to look was not
detected (R0), the look went to the wrong store or asked badly (R1), the
memory was not among the candidates (R2), or something stale or irrelevant
outranked it (R3). Then: in context but ignored (A0), used wrongly (U0).
Codes stored under the meanings the taxonomy had before were rewritten by
migration 0003 (see its CODE_MAP).
"""

from django.db import models


class FailureCode(models.TextChoices):
    W0 = "W0", "W0 write: the memory was not stored, or stored wrongly"
    W1 = "W1", "W1 consolidation: stored, but not consolidated or derived correctly"
    R0 = "R0", "R0 retrieval: the need to look was not detected (the agent did not look)"
    R1 = "R1", "R1 retrieval: the wrong store, or a poor query"
    R2 = "R2", "R2 retrieval: the memory was not among the candidates"
    R3 = "R3", "R3 retrieval: a stale or irrelevant memory outranked it"
    A0 = "A0", "A0 attention: in context, but ignored"
    U0 = "U0", "U0 use: used wrongly"
    P0 = "P0", "P0 prospective: an intention did not fire when due"
    P1 = "P1", "P1 prospective: an intention fired wrongly (twice, early, or after cancel)"
    S0 = "S0", "S0 skill: the skill was not retrieved"
    S1 = "S1", "S1 skill: selected, but not followed (not executed, or its execution failed)"
    S2 = "S2", "S2 skill: negative transfer, a skill applied where it does not fit"
    # Our addition: the evidence itself cannot be trusted.
    I0 = "I0", "I0 integrity: tampering or a broken chain went undetected"
