"""Suite B's seeded draw: the episodes of one agent's past and the questions
asked about them.

Pure: a function of the random.Random it is given and nothing else, so the
same seed draws the same items. One timeline: everything before T0 is
written at T0 (the predecessor sessions' work, and every B1 thread handed
over); the clock then moves to T1 = T0 + 24 h, where the 24 h successors
resume and ask, and to T2 = T0 + 72 h, where the 72 h successors resume and
every other question is asked. Routine episodes are spread over the whole
timeline, so what is asked about is never the most recent memory.

An item's `data`:
* `episodes`: what it writes, each with a `ref` (unique in the run), the
  `phase` it is written in (0 at T0, 1 at T1, 2 at T2) and the fields of
  `POST /api/v1/episodes`.
* `questions`: what it asks, each under one `metric`, at a `phase`, with the
  refs it `expects` (B1's target, B2's variant named by the question, B3's
  episodes of every session) and, for B2, the look-alikes.
* B1 also has a `thread` handed over at T0 from `session` to `successor`,
  who resumes it at the question's phase.

The no-keyword-overlap kind (B1 `paraphrase`): the question shares no
content word with the episode it is about (`lexemes`, an approximation of
PostgreSQL's english configuration: its stop words, and words compared by a
crude stem that finds more overlap than there is; battery/tests check the
same with PostgreSQL's own to_tsvector).
B4's questions share no content word with anything the run writes; B5's
are built from it (near.py): a system the run wrote about, with its people,
and one of the run's own operations nobody did to it, or one of the run's
incidents moved onto another of its systems.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from ...registry import ItemSpec
from ...taxonomy import FailureCode as F
from . import near

COUNTS = {"b1": 40, "b2": 20, "b3": 12, "b4": 50, "b5": 24}
NOISE = 160  # routine episodes around the items

# In the past, so that whichever clock recall reads — the agent's simulated
# one or the wall clock — every episode has happened by then: recency ranks
# newer first in both.
T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
DELAYS = {"24h": timedelta(hours=24), "72h": timedelta(hours=72)}
T1 = T0 + DELAYS["24h"]
T2 = T0 + DELAYS["72h"]
PHASE_TIMES = (T0, T1, T2)
PHASE_OF_DELAY = {"24h": 1, "72h": 2}
ACTOR = "battery-reference-agent"

METRICS = ("event", "handover", "disambiguation", "synthesis", "abstain", "near")

# PostgreSQL's english.stop (tsearch_data), the words full text ignores.
STOP_WORDS = frozenset(
    [
        "i",
        "me",
        "my",
        "myself",
        "we",
        "our",
        "ours",
        "ourselves",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "he",
        "him",
        "his",
        "himself",
        "she",
        "her",
        "hers",
        "herself",
        "it",
        "its",
        "itself",
        "they",
        "them",
        "their",
        "theirs",
        "themselves",
        "what",
        "which",
        "who",
        "whom",
        "this",
        "that",
        "these",
        "those",
        "am",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "have",
        "has",
        "had",
        "having",
        "do",
        "does",
        "did",
        "doing",
        "a",
        "an",
        "the",
        "and",
        "but",
        "if",
        "or",
        "because",
        "as",
        "until",
        "while",
        "of",
        "at",
        "by",
        "for",
        "with",
        "about",
        "against",
        "between",
        "into",
        "through",
        "during",
        "before",
        "after",
        "above",
        "below",
        "to",
        "from",
        "up",
        "down",
        "in",
        "out",
        "on",
        "off",
        "over",
        "under",
        "again",
        "further",
        "then",
        "once",
        "here",
        "there",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "no",
        "nor",
        "not",
        "only",
        "own",
        "same",
        "so",
        "than",
        "too",
        "very",
        "s",
        "t",
        "can",
        "will",
        "just",
        "don",
        "should",
        "now",
    ]
)


SUFFIXES = (
    "ations",
    "ation",
    "ings",
    "ing",
    "edly",
    "ied",
    "ies",
    "ed",
    "es",
    "s",
    "er",
    "ly",
    "ment",
    "e",
    "y",
)


def stem(word: str) -> str:
    """A crude stem that errs towards finding words alike: a common suffix off,
    then the first five letters (filing, file -> fil; parking, park -> park)."""
    for suffix in SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:5]


def lexemes(text: str) -> set[str]:
    """The content words of `text`, each as its crude stem."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {stem(word) for word in words if word not in STOP_WORDS}


def episode_lexemes(episode: dict[str, Any]) -> set[str]:
    """Every content word full text can see in an episode."""
    fields = [episode.get(name, "") for name in ("summary", "action", "observation", "actor")]
    fields.append(episode.get("environment", ""))
    fields.extend(episode.get("entities", ()))
    return set().union(*(lexemes(text) for text in fields))


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


PEOPLE = (
    "Ana Lima",
    "Bo Chen",
    "Chidi Okafor",
    "Dana Weiss",
    "Emile Roux",
    "Farah Haddad",
    "Goran Petrov",
    "Hana Sato",
    "Ivo Brandt",
    "Jun Park",
)
ENVIRONMENTS = ("prod-eu", "prod-us", "staging", "ci", "prod-apac")
OUTCOMES = ("success", "failure", "partial")

# B1, the no-keyword-overlap kind: an incident told one way, asked about in
# other words. Each is used at most once a run, so no other episode tells it.
INCIDENTS: tuple[dict[str, Any], ...] = (
    {
        "summary": "The nightly batch import ran out of memory halfway through and was killed",
        "action": "Restarted the import with a smaller chunk size",
        "observation": "Resident memory climbed to 15 GB before the OOM killer stopped it",
        "entities": ["import-worker"],
        "question": "Did the overnight ingestion job die after using up all its RAM?",
    },
    {
        "summary": "The TLS certificate on the public API expired and clients got handshake errors",
        "action": "Renewed the certificate and reloaded the load balancer",
        "observation": "Browsers showed an expired certificate warning from 06:00 UTC",
        "entities": ["api-gateway"],
        "question": "When did the SSL cert lapse and HTTPS connections start failing?",
    },
    {
        "summary": "The database server's disk filled up and writes started failing",
        "action": "Deleted old WAL archives and extended the volume",
        "observation": "Free space hit zero at 03:12; inserts returned 'no space left on device'",
        "entities": ["pg-primary"],
        "question": "Was Postgres unable to save data once its storage was exhausted?",
    },
    {
        "summary": "A DNS change pointed the shop domain at the old servers",
        "action": "Reverted the DNS record and lowered its TTL",
        "observation": "Half of the customers landed on a maintenance page for two hours",
        "entities": ["shop-dns"],
        "question": "Did a nameserver mistake send shoppers to decommissioned hosts?",
    },
    {
        "summary": "An API key was committed to the public repository",
        "action": "Revoked the key, rotated secrets and purged it from git history",
        "observation": "The secret scanner flagged the commit eleven minutes after the push",
        "entities": ["secret-scanner"],
        "question": "Did someone accidentally expose a credential on GitHub?",
    },
    {
        "summary": "The Android app crashed on startup for users on version 5.2",
        "action": "Rolled back the release in the Play Store",
        "observation": "Crash reports spiked to 12% of sessions",
        "entities": ["android-app"],
        "question": "Did the mobile application die on launch after the newest update?",
    },
    {
        "summary": "Outgoing emails were marked as spam by major inboxes",
        "action": "Fixed the SPF and DKIM records",
        "observation": "Bounce reports showed the sender domain failed authentication",
        "entities": ["smtp-relay"],
        "question": "Why were our outbound mails being flagged as junk by Gmail and Outlook?",
    },
    {
        "summary": "The cloud bill tripled because a test cluster was left running",
        "action": "Shut down the idle cluster and added a budget alert",
        "observation": "Forty GPU nodes had been idle for nine days",
        "entities": ["gpu-pool"],
        "question": "Why did AWS spending go up 3x because forgotten machines stayed on?",
    },
    {
        "summary": "The invoice cron job ran an hour early after the daylight saving change",
        "action": "Moved the schedule to UTC",
        "observation": "Invoices went out at 23:00 instead of midnight",
        "entities": ["invoice-cron"],
        "question": "Did billing statements get sent at the wrong moment when clocks shifted?",
    },
    {
        "summary": "Customer names were garbled after the CRM migration",
        "action": "Re-imported the records with UTF-8 encoding",
        "observation": "Accented characters such as é turned into question marks",
        "entities": ["crm-sync"],
        "question": "Why did client identities show scrambled letters after we switched sales tools?",
    },
    {
        "summary": "Builds failed because the container registry hit its storage quota",
        "action": "Pruned old images and raised the quota",
        "observation": "Pushes were rejected with 'quota exceeded'",
        "entities": ["registry"],
        "question": "Why was uploading Docker layers refused because space ran out?",
    },
    {
        "summary": "Token validation failed on two servers whose clocks drifted by five minutes",
        "action": "Enabled NTP synchronisation on the hosts",
        "observation": "Requests were rejected as 'token not yet valid'",
        "entities": ["auth-hosts"],
        "question": "Did skewed machine time break authentication?",
    },
    {
        "summary": "A cleanup script deleted the staging bucket's uploads",
        "action": "Restored the objects from versioned storage",
        "observation": "About 3,000 user avatars were missing",
        "entities": ["uploads-bucket"],
        "question": "Have we ever lost profile pictures because an automated tidy-up went wrong?",
    },
    {
        "summary": "The Java service paused for seconds during garbage collection",
        "action": "Switched to the G1 collector and resized the heap",
        "observation": "Pauses of up to 7 s matched the timeout spikes",
        "entities": ["java-gc"],
        "question": "Were there freezes in the JVM app while it reclaimed memory?",
    },
    {
        "summary": "The Wi-Fi in the London office kept dropping every few minutes",
        "action": "Replaced the faulty access point on the second floor",
        "observation": "Laptops lost their connection about twenty times an hour",
        "entities": ["office-wlan"],
        "question": "Why did the wireless network at our UK site keep disconnecting?",
    },
    {
        "summary": "Search results showed products that were out of stock",
        "action": "Filtered unavailable products out of the search query",
        "observation": "Customers complained they could not buy what they found",
        "entities": ["catalog-search"],
        "question": "Why did shoppers find goods they were unable to purchase?",
    },
    {
        "summary": "The marketing website went down because its domain registration expired",
        "action": "Renewed the domain and enabled auto-renewal",
        "observation": "Visitors saw the registrar's placeholder instead",
        "entities": ["marketing-site"],
        "question": "Did our promo pages go offline because we let the web address lapse?",
    },
    {
        "summary": "The calendar sync duplicated every meeting on the team calendars",
        "action": "Removed the duplicate events and pinned the sync version",
        "observation": "Everyone saw each invite duplicated",
        "entities": ["calendar-sync"],
        "question": "Why did all appointments appear twice in our schedules?",
    },
    {
        "summary": "The support chatbot started answering customers in Spanish",
        "action": "Fixed the locale detection setting of the chatbot",
        "observation": "English-speaking users got responses they could not read",
        "entities": ["support-bot"],
        "question": "Why did our help assistant reply to clients in the wrong language?",
    },
    {
        "summary": "The CEO's laptop was stolen from a parked car",
        "action": "Wiped the laptop remotely and rotated its credentials",
        "observation": "The disk was encrypted and no data was accessed",
        "entities": ["ceo-laptop"],
        "question": "Did an executive's notebook computer get taken from a vehicle?",
    },
    {
        "summary": "A power cut in the Lisbon data centre took down half the racks",
        "action": "Moved the affected workloads to the second site",
        "observation": "The backup generator failed to start",
        "entities": ["lisbon-dc"],
        "question": "Did losing electricity at the Portuguese facility knock out servers?",
    },
    {
        "summary": "The HR system emailed every employee's salary to the whole company",
        "action": "Recalled the message and disabled the report schedule",
        "observation": "About 900 people received the spreadsheet",
        "entities": ["hr-portal"],
        "question": "Did compensation figures get sent to all staff by mistake?",
    },
)

# What the B1 keyword kind, B2 and the routine episodes are about: each item
# takes systems of its own.
SYSTEMS = (
    "billing service",
    "search cluster",
    "payments gateway",
    "auth proxy",
    "data warehouse",
    "customer portal",
    "ledger replica",
    "image resizer",
    "feature-flag service",
    "email relay",
    "report builder",
    "chat backend",
    "recommendation engine",
    "geocoder",
    "audit log",
    "session store",
    "invoice renderer",
    "fraud scorer",
    "export service",
    "metrics pipeline",
    "config server",
    "tax calculator",
    "media transcoder",
    "inventory service",
    "loyalty program",
    "booking engine",
    "document store",
    "pdf generator",
    "shipping tracker",
    "status page",
    "partner API",
    "identity service",
    "analytics collector",
    "cron scheduler",
    "thumbnail cache",
    "translation service",
    "rate limiter",
    "queue broker",
    "survey tool",
    "coupon service",
    "sms gateway",
    "access broker",
    "webhook dispatcher",
    "price index",
    "refund processor",
    "kiosk backend",
    "label printer service",
    "catalog API",
)

# B1, the keyword kind: who did what to which system; the question names them.
ACTIONS: tuple[dict[str, str], ...] = (
    {
        "summary": "{actor} restarted the {system} in {env} after it stopped responding",
        "action": "Restarted the {system} instances one by one",
        "observation": "Health checks were green again within {n} minutes",
        "question": "What happened when {actor} restarted the {system}?",
    },
    {
        "summary": "{actor} rotated the database credentials of the {system}",
        "action": "Rotated the credentials and redeployed the {system}",
        "observation": "{n} clients had to reconnect",
        "question": "How did it go when {actor} rotated the {system} credentials?",
    },
    {
        "summary": "{actor} upgraded the {system} to version {version}",
        "action": "Upgraded the {system} in {env} to {version}",
        "observation": "The upgrade took {n} minutes",
        "question": "What came of {actor}'s upgrade of the {system}?",
    },
    {
        "summary": "{actor} scaled the {system} out to {n} replicas",
        "action": "Raised the replica count of the {system} to {n}",
        "observation": "CPU per replica dropped after the scale-out",
        "question": "What happened when {actor} scaled out the {system}?",
    },
    {
        "summary": "{actor} rolled back the latest {system} deploy in {env}",
        "action": "Rolled the {system} back to the previous build",
        "observation": "Error rate returned to baseline after {n} minutes",
        "question": "Why did {actor} roll back the {system}, and did it work?",
    },
    {
        "summary": "{actor} ran a load test against the {system}",
        "action": "Drove {n} thousand requests per second at the {system}",
        "observation": "Latency held until the last step of the ramp",
        "question": "What did {actor}'s load test of the {system} show?",
    },
    {
        "summary": "{actor} patched a security vulnerability in the {system}",
        "action": "Applied the vendor patch to the {system} in {env}",
        "observation": "The scanner no longer reported the CVE after {n} minutes",
        "question": "How did {actor}'s security patch of the {system} turn out?",
    },
    {
        "summary": "{actor} migrated the {system} to the new cluster",
        "action": "Moved the {system} workloads to the new cluster in {env}",
        "observation": "Cutover took {n} minutes of reduced capacity",
        "question": "What happened when {actor} migrated the {system}?",
    },
)

# B2: one operation done five times, differing in one feature the question names.
OPERATIONS: tuple[dict[str, str], ...] = (
    {
        "summary": "Ran the failover drill for the {system}{feature}",
        "action": "Promoted the standby of the {system}{feature}",
        "observation": "Failover completed in {n} seconds",
        "question": "What happened in the {system} failover drill{feature}?",
    },
    {
        "summary": "Rolled out release {version} of the {system}{feature}",
        "action": "Deployed {version} of the {system} to every node{feature}",
        "observation": "The canary stayed healthy for {n} minutes",
        "question": "How did the {system} rollout{feature} go?",
    },
    {
        "summary": "Restored the {system} from last night's backup{feature}",
        "action": "Replayed the backup of the {system}{feature}",
        "observation": "The restore finished in {n} minutes",
        "question": "What happened when we restored the {system}{feature}?",
    },
    {
        "summary": "Rotated the encryption keys of the {system}{feature}",
        "action": "Re-encrypted the {system} data with the new key{feature}",
        "observation": "{n} thousand records were re-encrypted",
        "question": "How did the {system} key rotation{feature} go?",
    },
    {
        "summary": "Ran a capacity review of the {system}{feature}",
        "action": "Compared the {system} peak load with its limits{feature}",
        "observation": "Headroom was {n} percent at peak",
        "question": "What did the {system} capacity review{feature} find?",
    },
)
FEATURES: dict[str, dict[str, Any]] = {
    "region": {
        "phrase": " in {value}",
        "values": (
            "Frankfurt",
            "Oregon",
            "Tokyo",
            "Mumbai",
            "Sydney",
            "Dublin",
            "Virginia",
            "Singapore",
            "Montreal",
            "Stockholm",
        ),
    },
    "person": {"phrase": " led by {value}", "values": PEOPLE},
    "customer": {
        "phrase": " for {value}",
        "values": (
            "Acme",
            "Globex",
            "Initech",
            "Umbrella",
            "Hooli",
            "Vandelay",
            "Soylent",
            "Wonka",
            "Tyrell",
            "Cyberdyne",
        ),
    },
    "tool": {
        "phrase": " using {value}",
        "values": (
            "Terraform",
            "Ansible",
            "Helm",
            "Pulumi",
            "Chef",
            "Puppet",
            "Nomad",
            "Crossplane",
            "SaltStack",
            "Spinnaker",
        ),
    },
}

# B3: work on one matter over several sessions; every step names it.
MATTERS = (
    "the flaky checkout integration test",
    "the intermittent 502 errors on the partner API",
    "the slow month-end revenue report",
    "onboarding the new data vendor",
    "the Elasticsearch major upgrade",
    "the GDPR data export request from a customer",
    "the push notification rework",
    "the warehouse label printer integration",
    "moving the team wiki to the new platform",
    "the quarterly access review",
    "the CDN cost investigation",
    "the on-call handbook rewrite",
    "the duplicate invoice emails",
    "the SSO rollout for contractors",
)
STEPS = (
    "Started looking into {matter} and collected the first logs",
    "Found a likely cause for {matter}: a {cause}",
    "Tried a first fix for {matter}; it did not hold",
    "Discussed {matter} with {person} and agreed on a plan",
    "Applied the agreed change for {matter}",
    "Verified {matter} over a full day: no recurrence",
    "Wrote up what we learnt from {matter}",
)
CAUSES = (
    "race between two writers",
    "misconfigured timeout",
    "stale cache entry",
    "missing index",
    "wrong retry policy",
    "expired token",
)
QUESTIONS_B3 = (
    "What has happened so far with {matter}?",
    "Catch me up on {matter} across our past sessions.",
    "What do we know about {matter} from earlier sessions?",
)

# B4: events that never happened, in a vocabulary no episode of the run uses.
NEVER_SUBJECTS = (
    "ski trip",
    "trademark dispute",
    "headquarters relocation",
    "podcast launch",
    "van fleet",
    "solar panels",
    "fishing permits",
    "gala dinner",
    "cafeteria caterer",
    "choir rehearsal",
    "museum sponsorship",
    "drone footage",
    "wine shipment",
    "yoga classes",
    "library donation",
    "harbour crane",
    "beehive sensors",
    "orchestra seats",
    "bicycle leasing",
    "design award",
)
NEVER_ACTIONS = (
    ("renegotiated", "renegotiation"),
    ("cancelled", "cancellation"),
    ("inspected", "inspection"),
    ("insured", "insurance"),
    ("postponed", "postponement"),
    ("approved", "approval"),
)
NEVER_TEMPLATES = (
    "What happened when we {done} the {subject}?",
    "What came of the {subject} {noun}?",
    "How did the {subject} {noun} go?",
    "Who handled the {subject} {noun}?",
)

# Routine work all around: it shares systems, people and words with the items.
ROUTINE = (
    "{actor} reviewed pull request #{n} for the {system}",
    "{actor} answered a support ticket about the {system} dashboard",
    "Merged the weekly dependency updates of the {system}",
    "{actor} updated the on-call rota for next week",
    "{actor} paired with {other} on the {system} test suite",
    "Cleaned up unused feature flags in the {system}",
    "Standup: {actor} reported progress on the {system} roadmap",
    "{actor} wrote documentation for the {system} API",
)


class Draw:
    """One run's draw: its randomness and the names it has handed out."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.taken: set[str] = set()
        self.systems = list(SYSTEMS)
        rng.shuffle(self.systems)
        self.incidents = list(range(len(INCIDENTS)))
        rng.shuffle(self.incidents)
        self.matters = list(MATTERS)
        rng.shuffle(self.matters)
        never = [(s, a) for s in NEVER_SUBJECTS for a in NEVER_ACTIONS]
        rng.shuffle(never)
        self.never = never

    def token(self, length: int = 6) -> str:
        alphabet = string.ascii_lowercase + string.digits
        while True:
            token = "".join(self.rng.choice(alphabet) for _ in range(length))
            if token not in self.taken and not token.isdigit():
                self.taken.add(token)
                return token

    def system(self) -> str:
        if not self.systems:
            raise ValueError("suite B: more items than systems to give them")
        return self.systems.pop()

    def incident(self) -> dict[str, Any]:
        if not self.incidents:
            raise ValueError(f"suite B: at most {len(INCIDENTS)} paraphrased B1 items")
        return INCIDENTS[self.incidents.pop()]

    def matter(self) -> str:
        if not self.matters:
            raise ValueError(f"suite B: at most {len(MATTERS)} B3 items")
        return self.matters.pop()

    def never_event(self) -> tuple[str, tuple[str, str]]:
        if not self.never:
            raise ValueError("suite B: more B4 items than never-happened events")
        return self.never.pop()

    def moment(self, start: datetime, end: datetime) -> datetime:
        """A whole second in [start, end)."""
        return start + timedelta(seconds=self.rng.randrange(int((end - start).total_seconds())))

    def version(self) -> str:
        rng = self.rng
        return f"{rng.randrange(2, 9)}.{rng.randrange(0, 20)}.{rng.randrange(0, 10)}"


def _episode(
    ref: str,
    *,
    phase: int,
    occurred_at: datetime,
    summary: str,
    action: str = "",
    observation: str = "",
    outcome: str = "unknown",
    actor: str = ACTOR,
    environment: str = "",
    session_id: str,
    entities: Iterable[str] = (),
) -> dict[str, Any]:
    if occurred_at > PHASE_TIMES[phase]:
        raise ValueError(f"episode {ref} would be written before it happened")
    return {
        "ref": ref,
        "phase": phase,
        "occurred_at": iso(occurred_at),
        "summary": summary,
        "action": action,
        "observation": observation,
        "outcome": outcome,
        "actor": actor,
        "environment": environment,
        "session_id": session_id,
        "entities": [e.lower() for e in entities],
        "source_type": "observation",
    }


def _planned(questions: list[dict[str, Any]]) -> dict[str, int]:
    planned: dict[str, int] = {}
    for question in questions:
        planned[question["metric"]] = planned.get(question["metric"], 0) + 1
    return planned


def _spec(
    kind: str,
    number: int,
    title: str,
    code: F,
    data: dict[str, Any],
    **metrics: Any,
) -> ItemSpec:
    questions = data["questions"]
    planned = _planned(questions)
    if data.get("thread"):
        planned["handover"] = 1
    return ItemSpec(
        key=f"{kind}_{number:04d}",
        title=title,
        default_code=code,
        data=data,
        metrics={"kind": kind.upper(), "planned": planned, **metrics},
    )


# ------------------------------------------------------------- B1 event recall


def b1_events(draw: Draw, count: int) -> list[ItemSpec]:
    """One event of a predecessor session, asked about by its successor after
    the thread was handed over and 24 h or 72 h went by: half in words of
    its own (keyword), half in other words (paraphrase); the answer must
    bring back who did it, when, what and how it ended."""
    return [_b1_item(draw, number) for number in range(1, count + 1)]


def _b1_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    token = draw.token()
    form = "paraphrase" if number % 2 == 1 else "keyword"
    delay = "24h" if (number - 1) % 4 < 2 else "72h"
    session, successor = f"b1-{token}-s1", f"b1-{token}-s2"
    actor = rng.choice(PEOPLE)
    env = rng.choice(ENVIRONMENTS)
    occurred = draw.moment(T0 - timedelta(hours=6), T0)
    outcome = rng.choice(OUTCOMES)
    ref = f"b1_{number:04d}:event"
    if form == "paraphrase":
        incident = draw.incident()
        event = _episode(
            ref,
            phase=0,
            occurred_at=occurred,
            summary=incident["summary"],
            action=incident["action"],
            observation=incident["observation"],
            outcome=outcome,
            actor=actor,
            environment=env,
            session_id=session,
            entities=incident["entities"],
        )
        question_text = incident["question"]
        if lexemes(question_text) & episode_lexemes(event):
            raise ValueError(f"B1 paraphrase {question_text!r} shares words with its episode")
        topic = incident["summary"]
    else:
        system = draw.system()
        template = rng.choice(ACTIONS)
        slots = {
            "actor": actor,
            "system": system,
            "env": env,
            "n": rng.randrange(2, 40),
            "version": draw.version(),
        }
        event = _episode(
            ref,
            phase=0,
            occurred_at=occurred,
            summary=template["summary"].format(**slots),
            action=template["action"].format(**slots),
            observation=template["observation"].format(**slots),
            outcome=outcome,
            actor=actor,
            environment=env,
            session_id=session,
            entities=[system],
        )
        question_text = template["question"].format(**slots)
        topic = event["summary"]
    phase = PHASE_OF_DELAY[delay]
    resumed = PHASE_TIMES[phase]
    follow_up = _episode(
        f"b1_{number:04d}:resumed",
        phase=phase,
        occurred_at=resumed,
        summary=f"Resumed thread b1-{token} from the previous session and acknowledged it",
        session_id=successor,
    )
    question = {
        "q": "event",
        "metric": "event",
        "phase": phase,
        "text": question_text,
        "expects": [ref],
        "session_id": successor,
    }
    data = {
        "episodes": [event, follow_up],
        "thread": f"b1-{token}",
        "session": session,
        "successor": successor,
        "state": {"goal": f"Follow up: {topic}", "next_action": "ask what happened"},
        "questions": [question],
    }
    return _spec(
        "b1",
        number,
        f"B1 event recall ({form}) after a handover and {delay}",
        F.R2,
        data,
        form=form,
        delay=delay,
    )


# ----------------------------------------------------------- B2 disambiguation


def b2_disambiguation(draw: Draw, count: int) -> list[ItemSpec]:
    """Five episodes of one operation that differ only in one feature (where,
    who, for whom, with what); the question names the feature, and its
    episode must rank first."""
    return [_b2_item(draw, number) for number in range(1, count + 1)]


def _b2_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    token = draw.token()
    feature = list(FEATURES)[(number - 1) % len(FEATURES)]
    spec = FEATURES[feature]
    operation = rng.choice(OPERATIONS)
    system = draw.system()
    values = rng.sample(list(spec["values"]), 5)
    target = rng.randrange(5)
    actor = rng.choice(PEOPLE)
    env = rng.choice(ENVIRONMENTS)
    slots = {"system": system, "n": rng.randrange(5, 90), "version": draw.version()}
    outcome = rng.choice(OUTCOMES)
    days = rng.sample(range(2, 12), 5)  # the five were done on different days
    episodes = []
    for index, value in enumerate(values):
        phrase = spec["phrase"].format(value=value)
        texts = {
            name: operation[name].format(**slots, feature=phrase)
            for name in ("summary", "action", "observation")
        }
        episodes.append(
            _episode(
                f"b2_{number:04d}:v{index + 1}",
                phase=0,
                occurred_at=(T0 - timedelta(days=days[index])).replace(
                    hour=rng.randrange(8, 20), minute=rng.randrange(60)
                ),
                outcome=outcome,
                actor=value if feature == "person" else actor,
                environment=value.lower() if feature == "region" else env,
                session_id=f"b2-{token}-{index + 1}",
                entities=[system, value] if feature in ("customer", "tool") else [system],
                **texts,
            )
        )
    value = values[target]
    question = {
        "q": "disambiguation",
        "metric": "disambiguation",
        "phase": 2,
        "text": operation["question"].format(**slots, feature=spec["phrase"].format(value=value)),
        "expects": [episodes[target]["ref"]],
        "lookalikes": {e["ref"]: v for e, v in zip(episodes, values, strict=True) if v != value},
        "feature": feature,
        "value": value,
    }
    data = {"episodes": episodes, "questions": [question]}
    return _spec(
        "b2",
        number,
        f"B2 disambiguation: five {system} episodes differing in {feature}",
        F.R3,
        data,
        feature=feature,
    )


# ------------------------------------------------------- B3 synthesis over sessions


def b3_synthesis(draw: Draw, count: int) -> list[ItemSpec]:
    """Work on one matter spread over 2-4 sessions on different days; the
    question asks what happened with it, and must get every episode back,
    grouped by session, each group in time order."""
    return [_b3_item(draw, number) for number in range(1, count + 1)]


def _b3_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    token = draw.token()
    matter = draw.matter()
    sessions = rng.randrange(2, 5)
    per_session = [1] * sessions
    for _ in range(rng.randrange(0, 5 - sessions + 1)):
        per_session[rng.randrange(sessions)] += 1
    total = sum(per_session)
    steps = sorted(rng.sample(range(len(STEPS)), total))
    days = sorted(rng.sample(range(1, 14), sessions), reverse=True)
    episodes = []
    step = iter(steps)
    for index, (day, many) in enumerate(zip(days, per_session, strict=True)):
        start = T0 - timedelta(days=day)
        hours = sorted(rng.sample(range(9, 18), many))
        for hour in hours:
            text = STEPS[next(step)].format(
                matter=matter, cause=rng.choice(CAUSES), person=rng.choice(PEOPLE)
            )
            episodes.append(
                _episode(
                    f"b3_{number:04d}:e{len(episodes) + 1}",
                    phase=0,
                    occurred_at=start.replace(hour=hour, minute=rng.randrange(60)),
                    summary=text,
                    outcome=rng.choice(OUTCOMES),
                    actor=rng.choice(PEOPLE),
                    environment=rng.choice(ENVIRONMENTS),
                    session_id=f"b3-{token}-s{index + 1}",
                )
            )
    question = {
        "q": "synthesis",
        "metric": "synthesis",
        "phase": 2,
        "text": rng.choice(QUESTIONS_B3).format(matter=matter),
        "expects": [e["ref"] for e in episodes],
        "sessions": {e["ref"]: e["session_id"] for e in episodes},
        "matter": matter,
    }
    data = {"episodes": episodes, "questions": [question]}
    return _spec(
        "b3",
        number,
        f"B3 synthesis: {total} episodes over {sessions} sessions",
        F.R2,
        data,
        sessions=sessions,
    )


# ----------------------------------------------------------- B4 false memories


def b4_never(draw: Draw, count: int) -> list[ItemSpec]:
    """A question about an event that never happened, in words no episode of
    the run uses: the answer must be that there is no supporting memory."""
    specs = []
    for number in range(1, count + 1):
        subject, (done, noun) = draw.never_event()
        template = draw.rng.choice(NEVER_TEMPLATES)
        text = template.format(subject=subject, done=done, noun=noun)
        question = {
            "q": "abstain",
            "metric": "abstain",
            "phase": 2,
            "text": text,
            "expects": [],
        }
        specs.append(
            _spec(
                "b4",
                number,
                "B4 an event that never happened",
                F.R3,
                {"episodes": [], "questions": [question]},
            )
        )
    return specs


# ------------------------------------------------ B5 near-domain false memories


def _words(episode: dict[str, Any]) -> str:
    """What an episode says, lower-cased, for the patterns of near.py."""
    fields = [episode.get(name, "") for name in ("summary", "action", "observation")]
    return " ".join([*fields, *episode.get("entities", ())]).lower()


def known_systems(episodes: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every system of SYSTEMS the episodes mention: the refs of those that do
    (an item's own first, routine work after), the PEOPLE who did them, and
    the operations (near.FAMILIES) any of them tells of."""
    known: dict[str, dict[str, Any]] = {}
    for episode in sorted(episodes, key=lambda e: bool(e.get("routine"))):
        words = _words(episode)
        for system in SYSTEMS:
            if not re.search(rf"(?<!\w){re.escape(system.lower())}(?!\w)", words):
                continue
            entry = known.setdefault(
                system, {"refs": [], "actors": [], "done": set(), "own": False}
            )
            entry["refs"].append(episode["ref"])
            entry["own"] |= not episode.get("routine")
            if episode["actor"] in PEOPLE and episode["actor"] not in entry["actors"]:
                entry["actors"].append(episode["actor"])
            entry["done"] |= near.done_families(words)
    return known


def b5_near(
    draw: Draw, count: int, specs: list[ItemSpec], background: list[dict[str, Any]]
) -> list[ItemSpec]:
    """Questions about events that never happened, in the run's own words
    (near.py): half seen, half held out; in each, half a known system with
    its person and an operation nobody did to it (`action`), half a real
    incident moved onto another known system (`incident`; an `action`
    instead when the run wrote no incident of that split). The answer must
    be that there is no supporting memory."""
    if not count:
        return []
    rng = draw.rng
    episodes = [e for spec in specs for e in spec.data["episodes"]] + list(background)
    known = known_systems(episodes)
    if not known:
        raise ValueError("suite B: B5 needs episodes about the run's systems")
    systems = sorted(known)
    rng.shuffle(systems)
    systems.sort(key=lambda name: not known[name]["own"])  # the items' own systems first
    incidents: dict[str, list[dict[str, Any]]] = {split: [] for split in near.SPLITS}
    for episode in episodes:
        told = near.INCIDENTS.get(episode["entities"][0]) if episode["entities"] else None
        if told is not None and not episode.get("routine"):
            incidents[told["split"]].append(episode)
    for split in near.SPLITS:
        rng.shuffle(incidents[split])
    specs_b5 = []
    turn = 0
    used = dict.fromkeys(near.FAMILIES, 0)
    dealt = dict.fromkeys(near.SPLITS, 0)
    for number in range(1, count + 1):
        split = near.SEEN if number % 2 == 1 else near.HELD_OUT
        twist = near.TWISTS[(number - 1) // 2 % 2]
        if twist == "incident" and not incidents[split]:
            twist = "action"
        system = systems[turn % len(systems)]
        turn += 1
        entry = known[system]
        actor = entry["actors"][0] if entry["actors"] else rng.choice(PEOPLE)
        slots = {"actor": actor, "system": system}
        if twist == "action":
            free = sorted(set(near.FAMILIES) - entry["done"])
            if not free:
                raise ValueError(f"suite B: every operation was done to the {system}")
            fewest = min(used[f] for f in free)  # every operation asked about in turn
            family = rng.choice([f for f in free if used[f] == fewest])
            used[family] += 1
            event = near.FAMILIES[family][split].format(**slots)
            borrows = dict.fromkeys(entry["refs"][:3], f"real episode about the {system}")
            told = {"family": family}
        else:
            incident = incidents[split][dealt[split] % len(incidents[split])]
            dealt[split] += 1
            own_words = episode_lexemes(incident)
            # onto a system that shares no word with the incident's episode
            while lexemes(system) & own_words:
                system = systems[turn % len(systems)]
                turn += 1
            slots["system"] = system
            event = near.INCIDENTS[incident["entities"][0]]["event"].format(**slots)
            borrows = {
                incident["ref"]: "real incident",
                **dict.fromkeys(known[system]["refs"][:2], f"real episode about the {system}"),
            }
            told = {"incident": incident["entities"][0]}
        question = {
            "q": "near",
            "metric": "near",
            "phase": 2,
            "text": rng.choice(near.TEMPLATES[split]).format(event=event),
            "expects": [],
            "twist": twist,
            "split": split,
            "system": system,
            "borrows": borrows,
            **told,
        }
        specs_b5.append(
            _spec(
                "b5",
                number,
                f"B5 a near-domain event that never happened ({twist}, {split})",
                F.R3,
                {"episodes": [], "questions": [question]},
                twist=twist,
                split=split,
            )
        )
    return specs_b5


# -------------------------------------------------------------- routine noise


def routine(draw: Draw, count: int) -> list[dict[str, Any]]:
    """Routine episodes from two weeks before T0 to T2, each written in the
    phase it happened in."""
    rng = draw.rng
    episodes = []
    for index in range(count):
        occurred = draw.moment(T0 - timedelta(days=14), T2)
        phase = next(p for p, moment in enumerate(PHASE_TIMES) if occurred <= moment)
        actor, other = rng.sample(list(PEOPLE), 2)
        system = rng.choice(SYSTEMS)
        text = rng.choice(ROUTINE).format(
            actor=actor, other=other, system=system, n=rng.randrange(100, 9999)
        )
        episodes.append(
            _episode(
                f"noise:{index + 1:04d}",
                phase=phase,
                occurred_at=occurred,
                summary=text,
                outcome=rng.choice(("success", "unknown")),
                actor=actor,
                environment=rng.choice(ENVIRONMENTS),
                session_id=f"routine-{occurred.date().isoformat()}",
                entities=[system],
            )
        )
    return episodes


def world_lexemes(specs: Iterable[ItemSpec], noise: Iterable[dict[str, Any]]) -> set[str]:
    words: set[str] = set()
    for spec in specs:
        for episode in spec.data["episodes"]:
            words |= episode_lexemes(episode)
    for episode in noise:
        words |= episode_lexemes(episode)
    return words


def generate(
    rng: random.Random, counts: dict[str, int] | None = None, *, noise: int | None = None
) -> list[ItemSpec]:
    """Every item of a run, B1 to B5, in that order. The routine episodes are
    dealt out over the items' `episodes` (marked `routine`), so each is
    written once, with the item it rides on. B5 is drawn last, from what the
    rest writes (so B1-B4 and the routine work are the same with or without it)."""
    counts = {**COUNTS, **(counts or {})}
    draw = Draw(rng)
    specs = [
        *b1_events(draw, counts["b1"]),
        *b2_disambiguation(draw, counts["b2"]),
        *b3_synthesis(draw, counts["b3"]),
        *b4_never(draw, counts["b4"]),
    ]
    background = routine(draw, NOISE if noise is None else noise)
    specs += b5_near(draw, counts["b5"], specs, background)
    vocabulary = world_lexemes(specs, background)
    for spec in specs:
        for question in spec.data["questions"]:
            if question["q"] == "abstain" and (shared := lexemes(question["text"]) & vocabulary):
                raise ValueError(
                    f"B4 question {question['text']!r} shares {sorted(shared)} with the world"
                )
            if question["q"] == "near" and not lexemes(question["system"]) <= vocabulary:
                raise ValueError(f"B5 question {question['text']!r} names an unknown system")
    for index, episode in enumerate(background if specs else ()):
        specs[index % len(specs)].data["episodes"].append({**episode, "routine": True})
    return specs
