"""The client's resources, one module per memory function (see _base for how one is written)."""

from .consolidation import Consolidation
from .episodes import Episodes
from .events import Events, Sources
from .facts import Entities, Facts, Predicates
from .forgetting import Erasures, RetentionPolicies
from .intentions import Intentions, Webhook
from .skills import Skills
from .working_state import WorkingStates

__all__ = [
    "Consolidation",
    "Entities",
    "Episodes",
    "Erasures",
    "Events",
    "Facts",
    "Intentions",
    "Predicates",
    "RetentionPolicies",
    "Skills",
    "Sources",
    "Webhook",
    "WorkingStates",
]
