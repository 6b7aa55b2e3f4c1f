"""The failure taxonomy (DESIGN.md §9): every failed item says where memory broke."""

from django.db import models


class FailureCode(models.TextChoices):
    W0 = "W0", "W0 write: the memory was not stored, or stored wrongly"
    W1 = "W1", "W1 consolidation: stored, but not consolidated or derived correctly"
    R0 = "R0", "R0 retrieval: the memory exists but was not found"
    R1 = "R1", "R1 retrieval: a wrong or stale memory was returned"
    R2 = "R2", "R2 retrieval: the right memory was ranked below noise"
    R3 = "R3", "R3 retrieval: returned what must not be (another agent's, purged, or not current)"
    A0 = "A0", "A0 attention: retrieved but not surfaced when the decision was made"
    U0 = "U0", "U0 use: surfaced but misapplied"
    P0 = "P0", "P0 prospective: an intention did not fire when due"
    P1 = "P1", "P1 prospective: an intention fired wrongly (twice, early, or after cancel)"
    S0 = "S0", "S0 skill: the procedure was not executed or failed"
    S1 = "S1", "S1 skill: the procedure was applied where it does not fit"
    # Our addition: the evidence itself cannot be trusted.
    I0 = "I0", "I0 integrity: tampering or a broken chain went undetected"
