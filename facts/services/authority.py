"""An agent's authority policy: whose word outranks whose, and what is admitted."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from piper.errors import InvalidInput
from piper.provenance import Authority
from piper.tenancy.models import Agent

from .. import projection as p
from ..models import (
    AuthorityPolicy,
)
from .common import OPERATOR, Provenance, append_and_apply


def authority_order_set(
    *,
    agent: Agent,
    order: Sequence[str],
    admit_from: str = "",
    provenance: Provenance = OPERATOR,
) -> AuthorityPolicy:
    """Set the agent's precedence of authorities, most trusted first (levels left
    out rank below the listed ones), and its admission threshold: with
    `admit_from`, a claim ranked below that level never becomes the believed
    value on its own word — it is kept as contested (in the operator's queue)
    until a trusted source says so or an operator accepts it."""
    order = list(order)
    unknown = [a for a in order if a not in Authority.values]
    if not order or unknown or len(set(order)) != len(order):
        raise InvalidInput(
            f"order must list distinct authority levels from {Authority.values}",
            details={"order": [f"unknown level {a!r}" for a in unknown] or ["empty or repeated"]},
        )
    if admit_from and admit_from not in Authority.values:
        raise InvalidInput(
            f"admit_from must be one of {Authority.values}, or empty to admit every claim",
            details={"admit_from": [f"unknown level {admit_from!r}"]},
        )
    payload = {"order": order, **({"admit_from": admit_from} if admit_from else {})}
    with transaction.atomic():
        return append_and_apply(
            agent=agent, drafts=[provenance.draft(p.AUTHORITY_ORDER_SET, payload)]
        )[0].obj
