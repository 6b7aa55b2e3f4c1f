"""Typed provenance shared by every memory app (DESIGN.md §3).

Provenance is never prose: where a memory came from (source_type), how far
to trust its origin (authority, an ordered level) and how sure the writer was
(confidence) are fields the agent and the resolvers condition on.
"""

from django.db import models


class SourceType(models.TextChoices):
    USER_STATEMENT = "user_statement", "User statement"
    TOOL_RESULT = "tool_result", "Tool result"
    OBSERVATION = "observation", "Observation"
    OPERATOR = "operator", "Operator"
    AGENT_INFERENCE = "agent_inference", "Agent inference"
    THIRD_PARTY = "third_party", "Third party"
    DOCUMENT = "document", "Document"


class Authority(models.TextChoices):
    """Ordered from most to least trusted; see AUTHORITY_ORDER."""

    OPERATOR = "operator", "Operator"
    SYSTEM_OBSERVATION = "system_observation", "System observation"
    USER_STATEMENT = "user_statement", "User statement"
    TOOL_RESULT = "tool_result", "Tool result"
    AGENT_INFERENCE = "agent_inference", "Agent inference"
    THIRD_PARTY = "third_party", "Third party"


# Default precedence, most trusted first. Agents may configure their own.
AUTHORITY_ORDER: tuple[str, ...] = tuple(Authority.values)

# The authority a claim gets when the writer names only its source type.
DEFAULT_AUTHORITY_FOR_SOURCE: dict[str, str] = {
    SourceType.OPERATOR: Authority.OPERATOR,
    SourceType.OBSERVATION: Authority.SYSTEM_OBSERVATION,
    SourceType.USER_STATEMENT: Authority.USER_STATEMENT,
    SourceType.TOOL_RESULT: Authority.TOOL_RESULT,
    SourceType.AGENT_INFERENCE: Authority.AGENT_INFERENCE,
    SourceType.THIRD_PARTY: Authority.THIRD_PARTY,
    SourceType.DOCUMENT: Authority.THIRD_PARTY,
}


def authority_rank(authority: str, order: tuple[str, ...] = AUTHORITY_ORDER) -> int:
    """Higher is more trusted. Unknown levels rank below every known one."""
    try:
        return len(order) - order.index(authority)
    except ValueError:
        return 0


class PrivacyClass(models.TextChoices):
    PUBLIC = "public", "Public"
    INTERNAL = "internal", "Internal"
    PERSONAL = "personal", "Personal data"
    SENSITIVE = "sensitive", "Sensitive"


# Least to most private: an API key reads up to its clearance.
PRIVACY_ORDER: tuple[str, ...] = ("public", "internal", "personal", "sensitive")


class RetentionClass(models.TextChoices):
    EPHEMERAL = "ephemeral", "Ephemeral (days)"
    STANDARD = "standard", "Standard"
    LONG_TERM = "long_term", "Long term"
    PERMANENT = "permanent", "Permanent (legal hold)"
