"""Agents (the tenants), their API keys and their clocks."""

from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.functions import Now

from piper.ids import uuid7
from piper.provenance import PrivacyClass


class Agent(models.Model):
    """The tenant. Every memory row belongs to exactly one agent."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    name = models.CharField(
        max_length=100,
        unique=True,
        verbose_name="name",
        help_text="Unique, human-readable name (letters, digits, '-', '_', '.').",
    )
    description = models.TextField(blank=True, default="", help_text="What this agent does.")
    is_active = models.BooleanField(
        default=True,
        help_text="Inactive agents cannot authenticate. Agents are deactivated, never deleted: "
        "their ledger is append-only.",
    )
    is_throwaway = models.BooleanField(
        default=False,
        help_text="Created by the Memory Battery for one run; never used by a real agent.",
    )
    created_at = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(name__regex=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"),
                name="agent_name_format",
            ),
        ]

    # DRF sets request.user to the authenticated agent.
    is_authenticated = True

    def __str__(self) -> str:
        return self.name


class Scope(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Write"
    ADMIN = "admin", "Admin"


# Far above any real client; below the column's limit (a larger number was a 500).
MAX_RATE_PER_MINUTE = 1_000_000


class ApiKey(models.Model):
    """A bearer key for one agent. Only its SHA-256 is stored; the key is shown once.

    Keys carry 256 bits of randomness, so a fast hash is enough: there is
    nothing to brute-force, and authentication stays one indexed lookup.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="api_keys")
    name = models.CharField(max_length=100, help_text="What the key is for, e.g. 'prod worker'.")
    prefix = models.CharField(
        max_length=16, editable=False, help_text="The key's first characters, to recognise it."
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = ArrayField(
        models.CharField(max_length=10, choices=Scope.choices),
        help_text="read: GET; write: POST/PUT/PATCH/DELETE; admin: both, plus key management.",
    )
    clearance = models.CharField(
        max_length=20,
        choices=PrivacyClass.choices,
        default=PrivacyClass.PERSONAL,
        help_text="The most private class of memory the key may read (public < internal < "
        "personal < sensitive); recall withholds the rest.",
    )
    rate_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_RATE_PER_MINUTE)],
        help_text="Requests per minute for this key; empty means the service default.",
    )
    tools = ArrayField(
        models.CharField(max_length=50),
        default=list,
        blank=True,
        help_text="The MCP tools this key may call (piper.mcp_server); empty: every tool "
        "its scopes allow.",
    )
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scopes__contained_by=Scope.values, scopes__len__gt=0),
                name="apikey_scopes_known_and_nonempty",
            ),
            models.CheckConstraint(
                condition=models.Q(rate_per_minute__isnull=True) | models.Q(rate_per_minute__gte=1),
                name="apikey_rate_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def allows(self, scope: str) -> bool:
        return Scope.ADMIN in self.scopes or scope in self.scopes


class AgentClock(models.Model):
    """A simulated 'now' for an agent (battery agents only): the intention engine,
    recall and retention use it instead of the wall clock (``piper.tenancy.clock``),
    so time-based behaviour is tested in seconds."""

    agent = models.OneToOneField(
        Agent, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    now = models.DateTimeField()

    class Meta:
        # Created by the intentions app; moved here without moving its rows.
        db_table = "intentions_agentclock"

    def __str__(self) -> str:
        return f"{self.agent_id}: {self.now}"
