"""Suite B5's vocabulary: events that never happened, told in the run's own words.

B4 asks about things nothing in the run resembles (a ski trip, a choir
rehearsal); an embedding keeps those far from every episode. The hard
negatives of real use are near: the same people, the same systems, the same
kind of work, put together into an event that did not occur. Two twists:

* `action`: a system the run wrote about, with the person who worked on it,
  doing one of the run's own operations (restart, rollback, failover drill,
  …) that nobody ever did to that system. Which operations each system had
  is read from what the run wrote (`FAMILIES[...]["done"]`, a pattern over
  the episodes' words), so the question is never about something true.
* `incident`: one of the run's real incidents (B1's paraphrased ones)
  moved onto another system of the run, one that shares no word with the
  incident's episode. Only incidents whose episode names its own subject
  plainly are moved (an incident "on two servers" might have been on any).

Both are split in two, like suite G3's vocabularies: the `seen` phrasings
and events, in the words the service's rules and its calibration set use
(`What happened when …`, `restarted`, `rolled back`, certificates that
expired), and the `held_out` ones, written for this suite only: a test
(battery/tests/test_suite_episodic.py) checks that no content word of a
held-out question template, action or incident appears in
recall/router.py, episodes/retrieval/query_analysis.py,
episodes/retrieval/calibration.py or episodes/calibration_set.json. The
held-out figure measures what the embedding and the threshold do with words
nobody tuned them on.
"""

from __future__ import annotations

import re
from typing import Any

SEEN, HELD_OUT = "seen", "held_out"
SPLITS = (SEEN, HELD_OUT)
TWISTS = ("action", "incident")

# The files whose words the held-out part must not use.
CODE_FILES = (
    "recall/router.py",
    "episodes/retrieval/query_analysis.py",
    "episodes/retrieval/calibration.py",
    "episodes/calibration_set.json",
)

# The run's operations (draw.ACTIONS, draw.OPERATIONS and the routine work),
# each with the pattern that finds it in what an episode says, and how a
# question tells it ({actor} did it to the {system}).
FAMILIES: dict[str, dict[str, Any]] = {
    "restart": {
        "done": r"\brestart",
        SEEN: "{actor} restarted the {system}",
        HELD_OUT: "{actor} rebooted the {system} boxes",
    },
    "rotate": {
        "done": r"\brotat",
        SEEN: "{actor} rotated the {system} credentials",
        HELD_OUT: "{actor} swapped the {system} logins",
    },
    "upgrade": {
        # a release rolled out, or the weekly dependency updates, is an upgrade too
        "done": r"\bupgrad|\brolled out\b|\brelease\b|\bdependency updates\b",
        SEEN: "{actor} upgraded the {system}",
        HELD_OUT: "{actor} bumped the {system} onto a fresher major",
    },
    "scale": {
        "done": r"\bscal(e|ed|ing)\b|\breplica",
        SEEN: "{actor} scaled out the {system}",
        HELD_OUT: "{actor} widened the {system} fleet",
    },
    "rollback": {
        "done": r"\brolled\b[^.]*\bback\b|\broll(ed)? back\b|\brollback",
        SEEN: "{actor} rolled back the {system}",
        HELD_OUT: "{actor} unwound the freshest {system} bundle",
    },
    "load_test": {
        "done": r"\bload test|\brequests per second\b",
        SEEN: "{actor} ran a load test against the {system}",
        HELD_OUT: "{actor} hammered the {system} with a synthetic barrage",
    },
    "patch": {
        "done": r"\bpatch|\bvulnerab|\bcve\b|\bdependency updates\b",
        SEEN: "{actor} patched a security vulnerability in the {system}",
        HELD_OUT: "{actor} hotfixed a flaw intruders abused in the {system}",
    },
    "migrate": {
        "done": r"\bmigrat|\bcutover\b|\bnew cluster\b",
        SEEN: "{actor} migrated the {system} to the new cluster",
        HELD_OUT: "{actor} relocated the {system} onto fresh hardware",
    },
    "failover": {
        "done": r"\bfailover\b|\bstandby\b",
        SEEN: "{actor} ran the failover drill for the {system}",
        HELD_OUT: "{actor} flipped the {system} across to its twin",
    },
    "restore": {
        "done": r"\brestor|\bbackup\b",
        SEEN: "{actor} restored the {system} from backup",
        HELD_OUT: "{actor} rebuilt the {system} from a snapshot",
    },
    "capacity": {
        "done": r"\bcapacity review\b|\bheadroom\b",
        SEEN: "{actor} ran a capacity review of the {system}",
        HELD_OUT: "{actor} estimated the {system}'s spare surplus",
    },
}

# Incidents of draw.INCIDENTS (by their entity) that name their own subject
# plainly, moved onto a {system}. Each is seen or held out as a whole: the
# held-out ones tell an incident in words the service's files never use.
INCIDENTS: dict[str, dict[str, str]] = {
    "import-worker": {
        "split": SEEN,
        "event": "the {system} ran out of memory halfway through and was killed",
    },
    "api-gateway": {"split": SEEN, "event": "the TLS certificate of the {system} expired"},
    "pg-primary": {"split": SEEN, "event": "the {system}'s own disk filled up and writes failed"},
    "shop-dns": {"split": SEEN, "event": "a DNS change pointed the {system} at the old servers"},
    "android-app": {
        "split": SEEN,
        "event": "the {system} crashed on startup for users on version 5.2",
    },
    "invoice-cron": {
        "split": HELD_OUT,
        "event": "the {system} triggered prematurely once summer began",
    },
    "crm-sync": {"split": HELD_OUT, "event": "the {system} mangled accented surnames"},
    "registry": {
        "split": SEEN,
        "event": "the {system} hit its storage quota and refused new writes",
    },
    "uploads-bucket": {
        "split": HELD_OUT,
        "event": "a tidy-up script wiped the {system}'s profile avatars",
    },
    "marketing-site": {
        "split": SEEN,
        "event": "the {system} went down because its domain registration expired",
    },
    "calendar-sync": {
        "split": HELD_OUT,
        "event": "the {system} cloned appointments in our diaries",
    },
    "hr-portal": {
        "split": HELD_OUT,
        "event": "the {system} broadcast payslips and salaries to the entire workforce",
    },
}

# How the question is put: {event} is a clause in the past tense.
TEMPLATES: dict[str, tuple[str, ...]] = {
    SEEN: (
        "What happened when {event}?",
        "How did it go when {event}?",
        "What came of it when {event}?",
    ),
    HELD_OUT: (
        "Recount the morning {event}.",
        "Jog my recollection: {event}, and then?",
        "Sketch for me how we tidied up after {event}.",
    ),
}


def done_families(text: str) -> set[str]:
    """The operations `text` (an episode's words, lower-cased) tells of."""
    return {name for name, family in FAMILIES.items() if re.search(family["done"], text)}
