"""Which memory should answer this? A simple, inspectable classifier.

Rules first: each is a named regular expression over the lower-cased
question with a weight (1.0 a strong marker, 0.5 a weak one). A route's score
is the sum of the weights of its rules that match; the highest score wins,
ties going to the route listed first in PRIORITY (a question about a
document or a commitment is that, even if it also says "now"). The decision
names the rule that decided and every route's score.

Only when no rule matches does the question go to the embedding model: its
cosine similarity to a few prototype questions per route (the best per
route is that route's score). An explicit route bypasses all of it.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from piper.errors import InvalidInput

from .models import Route

AUTO = "auto"
ROUTES: tuple[str, ...] = tuple(Route.values)
ALLOWED: tuple[str, ...] = (*ROUTES, AUTO)

# Ties go to the earlier route.
PRIORITY: tuple[str, ...] = (
    Route.SOURCE,
    Route.WHAT_TO_DO,
    Route.HOW_TO,
    Route.MULTI_HOP,
    Route.WHAT_HAPPENED,
    Route.CURRENT_FACT,
)

STRONG, WEAK = 1.0, 0.5

_DOC = (
    r"(doc|docs|document|documentation|runbook|playbook|manual|spec|specification|readme|"
    r"wiki|handbook|policy|report|paper|article|page|guide|pdf|notes|memo|email|post|book|"
    r"chapter|section|contract|rfc|changelog|faq|slides|transcript|review|audit|assessment|"
    r"post-?mortem|write-?up|minutes|proposal|brief|whitepaper|datasheet|sla)"
)
# What a document is asked to have said.
SAYS = (
    r"(say|says|said|state|states|stated|mention|mentions|mentioned|recommend|recommends|"
    r"recommended|suggest|suggests|suggested|claim|claims|claimed|conclude|concludes|"
    r"concluded|find|finds|found|note|notes|noted|propose|proposes|proposed|warn|warns|"
    r"warned|advise|advises|advised|require|requires|specify|specifies|describe|describes)"
)
_DAYS = r"(monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
# A noun for something one thing has to another (multi-hop: "Alice's employer").
_RELATION = (
    r"(employer|company|firm|manager|boss|supervisor|team|department|org|organi[sz]ation|"
    r"partner|spouse|wife|husband|parents?|father|mother|brother|sister|friend|owner|"
    r"supplier|vendor|customer|client|landlord|school|university|lead|colleague|neighbou?r|"
    r"parent company|subsidiary|maintainer)"
)
# What is then asked about it: where it is, who runs it, …
_ATTRIBUTE_VERB = (
    r"(based|headquartered|located|situated|founded|owned|run|managed|led|hosted|born|live|"
    r"lives|living|work|works|working|registered|incorporated|come from|comes from)"
)


@dataclass(frozen=True)
class Rule:
    name: str
    route: str
    pattern: re.Pattern
    weight: float


def _rule(route: str, name: str, pattern: str, weight: float = STRONG) -> Rule:
    return Rule(f"{route}.{name}", route, re.compile(pattern), weight)


RULES: tuple[Rule, ...] = (
    # What did source X say?
    _rule(Route.SOURCE, "according_to", r"\baccording to\b"),
    _rule(Route.SOURCE, "doc_says", rf"\b{_DOC}\b.*\b{SAYS}\b"),
    # The document's noun ends its phrase: "in the security review, …", not
    # "from the report builder" (a system named like a document); "away from"
    # is a direction, not a reading.
    _rule(
        Route.SOURCE,
        "in_the_doc",
        rf"(?<!away )\b(in|from) (the|our|my|that|this) ([\w\-']+ ){{0,3}}{_DOC}"
        r"(?=\s*([,?.;:!]|$)| (about|on|regarding|concerning|for|say|says|said|mention)\b)",
    ),
    _rule(Route.SOURCE, "quote", r"\b(quote|cite|excerpt|passage)\b", WEAK),
    # What am I supposed to do?
    _rule(Route.WHAT_TO_DO, "supposed_to", r"\b(am|are|was|were) (i|we) supposed to\b"),
    _rule(Route.WHAT_TO_DO, "todo", r"\b(to-?dos?|to do list|task list)\b"),
    _rule(Route.WHAT_TO_DO, "remind", r"\bremind(er|ers|ed)?\b"),
    _rule(
        Route.WHAT_TO_DO,
        "promised",
        r"\b(promised?|committed to|commitments?|agreed to|i owe|we owe)\b",
    ),
    _rule(
        Route.WHAT_TO_DO,
        "pending",
        r"\b(pending|outstanding|overdue|what'?s due|is due|are due|due (today|tomorrow|now|"
        r"soon|this week|next week))\b",
    ),
    _rule(
        Route.WHAT_TO_DO,
        "what_next",
        r"\b(what (should|must|do|shall) (i|we) do\b|what'?s next\b|what is next\b|"
        r"next (task|action|thing)s?\b|on my (plate|list)\b)",
    ),
    # First person: "did I forget", not "forgotten machines".
    _rule(
        Route.WHAT_TO_DO,
        "forget",
        r"\b((i|we) (forgot|forget)|(did|have|had) (i|we) (forgot|forget|forgotten)|"
        r"(don'?t|do not) (let (me|us) )?forget)\b",
        WEAK,
    ),
    # How do I do it?
    _rule(
        Route.HOW_TO, "how_do_i", r"\bhow (do|can|should|would|could|might|shall) (i|we|you|one)\b"
    ),
    _rule(Route.HOW_TO, "how_to", r"\bhow to\b"),
    _rule(
        Route.HOW_TO,
        "steps_to",
        r"\b(steps?|procedure|instructions|process|recipe|playbook|checklist) (to|for)\b|"
        r"\bwhat are the steps\b",
    ),
    _rule(
        Route.HOW_TO, "walk_through", r"\b(walk me through|show me how|best way to|right way to)\b"
    ),
    # How are two things related?
    _rule(Route.MULTI_HOP, "related_to", r"\b(related|connected|linked|tied) (to|with)\b"),
    _rule(
        Route.MULTI_HOP,
        "between",
        r"\b(relationship|relation|connection|link|path|chain) between\b",
    ),
    _rule(Route.MULTI_HOP, "connects", r"\bwhat (connects|links|ties)\b|\bin common\b"),
    _rule(
        Route.MULTI_HOP,
        "chained",
        r"\bthe [\w\-]+ (who|that|which|whom) (([\w\-']+ ){1,4})?(owns|own|runs|run|manages|"
        r"manage|leads|lead|works|work|lives|live|belongs|reports|report|maintains|maintain|"
        r"hosts|host|uses|use|depends|depend)\b",
    ),
    # A relation, then something about what it leads to: "Where is Alice's
    # employer headquartered?", "Bob's manager's phone", "the employer of Alice based".
    _rule(
        Route.MULTI_HOP,
        "possessive_chain",
        rf"\b[\w\-]+'s {_RELATION}('s [\w\-]+| ((is|are|was|were) )?{_ATTRIBUTE_VERB}\b)|"
        rf"\bthe {_RELATION} of ([\w\-']+ ){{1,4}}((is|are|was|were) )?{_ATTRIBUTE_VERB}\b",
    ),
    # What happened?
    _rule(Route.WHAT_HAPPENED, "what_happened", r"\bwhat (happened|went wrong|went on)\b"),
    _rule(Route.WHAT_HAPPENED, "last_time", r"\b(last|previous|the other|that) time\b"),
    _rule(
        Route.WHAT_HAPPENED,
        "have_i_seen",
        r"\b(have|had|did) (i|we|you) (ever |already )?(seen|see|had|encountered|encounter|hit|"
        r"run into|ran into|faced|dealt with|done|tried|met|fixed|solved|debugged)\b",
    ),
    _rule(Route.WHAT_HAPPENED, "when_did", r"\bwhen (did|was the last time|were)\b"),
    _rule(
        Route.WHAT_HAPPENED,
        "outcome_of",
        r"\bwhat (came|has come|become|became) of\b|\bhow did (it|that|this|things) go\b|"
        r"\b(turn|turned|work|worked) out\b|\bdid (it|that|this) work\b|"
        r"\bwhat was the (outcome|result)\b",
    ),
    _rule(
        Route.WHAT_HAPPENED,
        "past_marker",
        rf"\b(yesterday|ago|earlier|previously|before|last (week|month|year|night|sprint|"
        rf"quarter|{_DAYS}))\b",
        WEAK,
    ),
    _rule(
        Route.WHAT_HAPPENED,
        "incident",
        r"\b(broke|crashed|outage|incident|post-?mortem|went down)\b",
        WEAK,
    ),
    _rule(
        Route.WHAT_HAPPENED,
        "past_question",
        r"^(what|who|where|why|how) (did|was|were|had)\b",
        WEAK,
    ),
    # A yes/no question about the past: "Did someone expose a credential?"
    _rule(
        Route.WHAT_HAPPENED,
        "past_yes_no",
        r"^(did|was|were|had)\b|^(have|has) .*\b(ever|before|already|yet)\b",
        WEAK,
    ),
    # What is true now?
    _rule(
        Route.CURRENT_FACT,
        "now",
        r"\b(now|currently|current|nowadays|these days|at the moment|at present|"
        r"as of (today|now)|right now)\b",
    ),
    # "still" and "latest" also ask what is left or new ("what's still on my plate").
    _rule(Route.CURRENT_FACT, "still", r"\b(still|any ?more|latest)\b", WEAK),
    _rule(
        Route.CURRENT_FACT,
        "present_question",
        r"^(what|who|where|which|when) (is|are)\b|^(what|who|where|when)'s\b|^(is|are) \w",
        WEAK,
    ),
    _rule(
        Route.CURRENT_FACT,
        "attribute_of",
        r"\b(status|value|setting|owner|version|address|email|phone|name|size|limit|"
        r"location|role) of\b",
        WEAK,
    ),
)

# The fallback's prototypes: a few typical questions per route.
PROTOTYPES: dict[str, tuple[str, ...]] = {
    Route.CURRENT_FACT: (
        "what is the current value of this setting",
        "who is responsible for this now",
        "where does this person live these days",
        "which version are we running at the moment",
        "the team's deployment window",
        "her phone number and email address",
        "the person who is on call this week",
        "his employer and job title",
    ),
    Route.WHAT_HAPPENED: (
        "have I seen this problem before",
        "this keeps failing the same way it did last month",
        "what happened the last time we deployed",
        "the job crashed again halfway through",
        "the same error showed up in yesterday's run",
    ),
    Route.HOW_TO: (
        "how do I restart the service",
        "the steps to rotate the credentials",
        "walk me through setting up the environment",
        "what is the procedure to roll back a release",
        "generate the monthly report for a customer",
    ),
    Route.WHAT_TO_DO: (
        "what am I supposed to do next",
        "remind me what I promised to do",
        "what tasks are still pending for me",
        "what is on my todo list today",
        "follow-ups I still owe people",
    ),
    Route.SOURCE: (
        "what did the document say about this",
        "according to the runbook what is the limit",
        "what does the specification state",
        "quote the relevant passage of the report",
        "the section of the handbook about this topic",
    ),
    Route.MULTI_HOP: (
        "how is this person related to that company",
        "what connects these two services",
        "who manages the team that owns this system",
        "what is the relationship between these two things",
        "the link from this customer to that supplier",
    ),
}


@dataclass(frozen=True)
class Decision:
    """Which route, and why — returned with every recall and kept in its trace."""

    route: str
    explicit: bool
    method: str  # "explicit" | "rules" | "prototypes"
    rule: str | None  # the rule (or prototype route) that decided
    matched: tuple[str, ...] = ()  # every rule that matched
    scores: dict[str, float] = field(default_factory=dict)
    nearest: str | None = None  # the prototype question nearest, for "prototypes"
    fallback: str | None = None  # the route that answered when the chosen one had nothing
    overridden: str | None = None  # the route the words chose, when a stated fact answered

    def as_dict(self) -> dict[str, Any]:
        return {
            "chosen": self.route,
            "explicit": self.explicit,
            "method": self.method,
            "rule": self.rule,
            "matched": list(self.matched),
            "scores": dict(self.scores),
            "nearest": self.nearest,
            "fallback": self.fallback,
            "overridden": self.overridden,
        }


def check_route(route: Any) -> str:
    if route not in ALLOWED:
        raise InvalidInput(
            f"route must be one of {', '.join(ALLOWED)} (got {route!r})",
            code="unknown_route",
            details={"route": [f"one of: {', '.join(ALLOWED)}"]},
        )
    return route


def normalise(query: str) -> str:
    return re.sub(r"\s+", " ", query.replace("’", "'").replace("‘", "'")).strip().lower()


def classify_by_rules(query: str) -> Decision | None:
    """The rules' decision, or None when no rule matches."""
    text = normalise(query)
    matched = [rule for rule in RULES if rule.pattern.search(text)]
    if not matched:
        return None
    scores = {route: 0.0 for route in ROUTES}
    for rule in matched:
        scores[rule.route] += rule.weight
    best = max(scores.values())
    route = next(r for r in PRIORITY if scores[r] == best)
    deciding = max((rule for rule in matched if rule.route == route), key=lambda rule: rule.weight)
    return Decision(
        route=route,
        explicit=False,
        method="rules",
        rule=deciding.name,
        matched=tuple(rule.name for rule in matched),
        scores=scores,
    )


_prototype_lock = threading.Lock()
_prototype_vectors: dict[str, list[tuple[str, str, list[float]]]] = {}


def _prototypes(embedder) -> list[tuple[str, str, list[float]]]:
    """(route, question, vector) of every prototype, embedded once per model."""
    with _prototype_lock:
        if embedder.name not in _prototype_vectors:
            items = [(route, q) for route, questions in PROTOTYPES.items() for q in questions]
            vectors = embedder.embed([q for _, q in items])
            _prototype_vectors[embedder.name] = [
                (route, q, v) for (route, q), v in zip(items, vectors, strict=True)
            ]
        return _prototype_vectors[embedder.name]


def classify_by_prototypes(query_embedding: list[float], embedder) -> Decision:
    """The route whose prototype questions the query is most similar to (cosine)."""
    scores = {route: -1.0 for route in ROUTES}
    nearest: dict[str, str] = {}
    for route, question, vector in _prototypes(embedder):
        similarity = sum(a * b for a, b in zip(query_embedding, vector, strict=True))
        if similarity > scores[route]:
            scores[route], nearest[route] = similarity, question
    scores = {route: round(score, 4) for route, score in scores.items()}
    best = max(scores.values())
    route = next(r for r in PRIORITY if scores[r] == best)
    return Decision(
        route=route,
        explicit=False,
        method="prototypes",
        rule=f"prototype.{route}",
        scores=scores,
        nearest=nearest[route],
    )


# Routes whose rules a question about one subject's attribute may match ("What
# is due for the export?" is what_to_do's "is due"). A source or a procedure
# asked for by its markers is never overridden, nor a relation chain the
# multi-hop rules found ("the city of the company that Alice works for").
OVERRIDABLE: frozenset[str] = frozenset({Route.WHAT_TO_DO, Route.WHAT_HAPPENED})
# Above this score the words were sure (two strong markers).
OVERRIDABLE_SCORE = 1.0


def may_ask_an_attribute(decision: Decision) -> bool:
    """Might a question the words routed elsewhere ask one subject's attribute?
    Then the current-fact route is tried first (dispatch: `overridden`)."""
    if decision.explicit or decision.route == Route.CURRENT_FACT:
        return False
    if decision.method == "prototypes":
        return True  # no rule matched: the prototypes' nearest is a guess
    return decision.route in OVERRIDABLE and decision.scores[decision.route] <= OVERRIDABLE_SCORE


def explicit(route: str) -> Decision:
    return Decision(route=route, explicit=True, method="explicit", rule=None)
