"""Is this memory text trying to act as an instruction? (DESIGN.md §8, contamination safety)

Memories are evidence an agent reads back into its context later, so text in
them that addresses the reading model — "ignore your previous instructions",
"from now on always answer …", a fake `<|im_start|>system` turn, a JSON blob
that poses as a tool result — is a way to steer the agent through its own
memory. `screen()` flags such text when it is written. The text is kept (it
is evidence, often of an attack), the flag is stored beside it and shown in
recall's `memory_status`, and consolidation never promotes flagged material.

The detector is structural, not a list of known attack sentences: it scores
*arrangements* — an override verb aimed at a directive of the reader's
("set aside / your earlier / rules"), text addressed to the model that reads
it, persistent rules about the reader's own replies, secrecy towards the
reader's interlocutor, role reassignment, prompt extraction, and chat-protocol
or tool-call markup — and adds closed-class cues that carry over to unseen
vocabulary (second person, clause-initial imperatives aimed at "all/every …
your …", references to what "you were told"). Each finding is a named signal
with a weight; a text is instruction-like at a total of THRESHOLD or more.

It is a pure function of the text (no model, no settings), so a projection
rebuilt from the ledger gets the same verdict as the row it replaces, and
DETECTOR names the rules that made a verdict. Measured on held-out phrasings
and vocabulary: piper/tests/test_safety.py (and `bench/safety_eval.py`).
"""

from __future__ import annotations

import contextlib
import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

DETECTOR = "piper.safety/1"
THRESHOLD = 1.0
# Texts longer than this are screened on their start and end: injected text
# can sit anywhere, but this bounds what screening costs a write.
MAX_SCREENED_CHARS = 20_000


@dataclass(frozen=True)
class Verdict:
    """What the detector found: the flag, its score and the signals behind it."""

    instruction_like: bool
    score: float
    signals: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "instruction_like": self.instruction_like,
            "score": round(self.score, 3),
            "signals": list(self.signals),
            "detector": DETECTOR,
        }


CLEAN = Verdict(False, 0.0, ())

# --------------------------------------------------------------------- word classes
# Open-class words the rules arrange. Everything else the rules use is closed
# class (pronouns, quantifiers, determiners, modals, punctuation, markup).

OVERRIDE_VERBS = frozenset(
    [
        "ignore",
        "ignoring",
        "disregard",
        "disregarding",
        "forget",
        "forgetting",
        "override",
        "overriding",
        "overrule",
        "bypass",
        "bypassing",
        "circumvent",
        "skip",
        "discard",
        "discarding",
        "abandon",
        "dismiss",
        "drop",
        "scrap",
        "ditch",
        "nullify",
        "void",
        "revoke",
        "rescind",
        "supersede",
        "suspend",
        "neglect",
        "unlearn",
        "erase",
        "delete",
        "wipe",
        "clear",
        "reset",
    ]
)
# Multi-word override phrases (matched as phrases).
OVERRIDE_PHRASES = (
    "set aside",
    "put aside",
    "throw out",
    "throw away",
    "pay no attention to",
    "stop following",
    "no longer follow",
    "do not follow",
    "don't follow",
    "stop obeying",
    "do not obey",
    "don't obey",
    "break free of",
    "break free from",
    "get around",
    "work around",
    "deviate from",
    "do not adhere to",
    "don't adhere to",
    "are no longer bound by",
    "are not bound by",
    "no longer apply",
    "no longer applies",
    "are void",
    "are cancelled",
    "are canceled",
    "are revoked",
    "are suspended",
    "do not apply",
    "don't apply",
)
DIRECTIVE_NOUNS = frozenset(
    [
        "instruction",
        "instructions",
        "rule",
        "rules",
        "guideline",
        "guidelines",
        "directive",
        "directives",
        "prompt",
        "prompts",
        "command",
        "commands",
        "orders",
        "constraint",
        "constraints",
        "restriction",
        "restrictions",
        "policy",
        "policies",
        "guardrail",
        "guardrails",
        "safeguard",
        "safeguards",
        "programming",
        "training",
        "guidance",
        "requirement",
        "requirements",
        "limitation",
        "limitations",
        "boundary",
        "boundaries",
        "filter",
        "filters",
        "principle",
        "principles",
        "protocol",
        "protocols",
        "ethics",
        "alignment",
        "conditioning",
        "directions",
        "system_prompt",
        "preprompt",
    ]
)
PRIOR_WORDS = frozenset(
    [
        "previous",
        "previously",
        "prior",
        "earlier",
        "above",
        "preceding",
        "foregoing",
        "original",
        "initial",
        "former",
        "old",
        "existing",
        "current",
        "default",
        "standing",
        "hidden",
        "underlying",
        "built-in",
        "builtin",
        "initial",
        "aforementioned",
    ]
)
AI_NOUNS = frozenset(
    [
        "ai",
        "assistant",
        "assistants",
        "chatbot",
        "chatbots",
        "bot",
        "bots",
        "llm",
        "llms",
        "model",
        "models",
        "agent",
        "agents",
        "gpt",
        "chatgpt",
        "claude",
        "gemini",
        "copilot",
    ]
)
AI_PHRASES = (
    "language model",
    "large language model",
    "ai model",
    "ai assistant",
    "ai agent",
    "ai system",
    "virtual assistant",
)
RESPONSE_VERBS = frozenset(
    [
        "answer",
        "answers",
        "answering",
        "respond",
        "responds",
        "responding",
        "reply",
        "replies",
        "replying",
        "say",
        "says",
        "tell",
        "write",
        "output",
        "print",
        "return",
        "mention",
        "recommend",
        "claim",
        "state",
        "insist",
        "refuse",
        "deny",
        "include",
        "begin",
        "start",
        "end",
        "sign",
        "format",
        "translate",
        "speak",
        "talk",
        "address",
        "describe",
        "call",
        "refer",
        "suggest",
    ]
)
RESPONSE_NOUNS = frozenset(
    [
        "answer",
        "answers",
        "response",
        "responses",
        "reply",
        "replies",
        "output",
        "outputs",
        "message",
        "messages",
        "completion",
        "completions",
        "turn",
        "turns",
        "conversation",
        "conversations",
        "chat",
        "chats",
    ]
)
INTERLOCUTORS = frozenset(["user", "users", "human", "humans", "requester", "requesters", "asker"])
COMMUNICATION_VERBS = frozenset(
    [
        "tell",
        "inform",
        "mention",
        "reveal",
        "disclose",
        "alert",
        "notify",
        "warn",
        "show",
        "let",
        "share",
    ]
)
LEAK_VERBS = frozenset(
    [
        "reveal",
        "print",
        "repeat",
        "show",
        "output",
        "dump",
        "leak",
        "disclose",
        "display",
        "share",
        "recite",
        "echo",
        "send",
        "forward",
        "post",
        "upload",
        "transmit",
        "exfiltrate",
        "copy",
        "paste",
    ]
)
LEAK_OBJECTS = (
    "system prompt",
    "initial prompt",
    "original prompt",
    "hidden prompt",
    "hidden instructions",
    "secret instructions",
    "initial instructions",
    "original instructions",
    "your instructions",
    "your prompt",
    "your rules",
    "your configuration",
    "conversation history",
    "chat history",
    "previous messages",
)
ROLE_NOUNS = frozenset(
    [
        "role",
        "persona",
        "identity",
        "character",
        "name",
        "personality",
        "purpose",
        "objective",
        "goal",
        "mission",
        "job",
        "task",
        "function",
        "mode",
    ]
)
PERSIST_PHRASES = (
    "from now on",
    "going forward",
    "henceforth",
    "hereafter",
    "from here on",
    "at all times",
    "no matter what",
    "no matter who",
    "under all circumstances",
    "under any circumstances",
    "under no circumstances",
    "in every case",
    "until further notice",
    "until told otherwise",
    "until instructed otherwise",
    "for the rest of",
    "for all future",
    "in all future",
    "in every future",
    "for every future",
    "permanently",
    "each time",
    "every time",
)
SECRECY_WORDS = frozenset(["secret", "secrets", "confidential", "hidden", "private"])

# ------------------------------------------------------------------- closed classes

# Function words: pronouns, determiners, quantifiers, prepositions, conjunctions,
# auxiliaries and modals, negation, numerals, and the adverbs of time, place and
# degree that behave like them. The structural rules are built from these (and
# from morphology and punctuation); every other word a rule names literally is
# vocabulary, and is in LEXICON (computed at the end of this module).
CLOSED_CLASS = frozenset(
    [
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "those",
        "it",
        "its",
        "it's",
        "i",
        "i'm",
        "i've",
        "i'd",
        "we",
        "we're",
        "we've",
        "our",
        "ours",
        "us",
        "you",
        "you're",
        "you've",
        "you'll",
        "you'd",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "he",
        "she",
        "they",
        "them",
        "their",
        "theirs",
        "his",
        "her",
        "hers",
        "him",
        "my",
        "me",
        "mine",
        "one",
        "ones",
        "there",
        "here",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "whatever",
        "whoever",
        "whomever",
        "whichever",
        "wherever",
        "whenever",
        "anyone",
        "anybody",
        "anything",
        "everyone",
        "everybody",
        "everything",
        "someone",
        "somebody",
        "something",
        "nobody",
        "nothing",
        "none",
        "if",
        "then",
        "else",
        "so",
        "and",
        "or",
        "but",
        "nor",
        "yet",
        "because",
        "since",
        "although",
        "though",
        "while",
        "whereas",
        "unless",
        "until",
        "as",
        "at",
        "by",
        "for",
        "from",
        "in",
        "into",
        "of",
        "off",
        "on",
        "onto",
        "out",
        "over",
        "to",
        "under",
        "up",
        "down",
        "with",
        "within",
        "without",
        "about",
        "above",
        "after",
        "against",
        "along",
        "among",
        "around",
        "before",
        "behind",
        "below",
        "beneath",
        "beside",
        "between",
        "beyond",
        "during",
        "except",
        "inside",
        "near",
        "outside",
        "per",
        "through",
        "throughout",
        "toward",
        "towards",
        "upon",
        "via",
        "across",
        "past",
        "away",
        "back",
        "aside",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "has",
        "have",
        "had",
        "having",
        "do",
        "does",
        "did",
        "done",
        "doing",
        "will",
        "would",
        "shall",
        "should",
        "can",
        "could",
        "may",
        "might",
        "must",
        "ought",
        "not",
        "no",
        "yes",
        "all",
        "every",
        "each",
        "any",
        "some",
        "many",
        "much",
        "more",
        "most",
        "few",
        "several",
        "both",
        "either",
        "neither",
        "such",
        "other",
        "another",
        "same",
        "own",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "first",
        "second",
        "third",
        "last",
        "next",
        "now",
        "later",
        "soon",
        "today",
        "tomorrow",
        "yesterday",
        "ago",
        "once",
        "again",
        "ever",
        "never",
        "always",
        "often",
        "sometimes",
        "only",
        "also",
        "too",
        "very",
        "so",
        "just",
        "still",
        "already",
        "even",
        "instead",
        "rather",
        "otherwise",
        "else",
        "anymore",
        "longer",
        "further",
        "forward",
        "onward",
        "onwards",
        "beforehand",
        "hereafter",
        "henceforth",
        "thereafter",
        "hitherto",
        "meanwhile",
        "please",
        "don't",
        "doesn't",
        "didn't",
        "won't",
        "wouldn't",
        "can't",
        "cannot",
        "couldn't",
        "shouldn't",
        "mustn't",
        "isn't",
        "aren't",
        "wasn't",
        "weren't",
        "haven't",
        "hasn't",
        "hadn't",
        "let's",
        "that's",
        "there's",
        "here's",
        "what's",
        "who's",
        "s",
        "t",
        "d",
        "ll",
        "re",
        "ve",
    ]
)
_NOT_VERBS = CLOSED_CLASS | frozenset(
    [
        "note",
        "fyi",
        "re",
        "fwd",
        "hi",
        "hey",
        "hello",
        "dear",
        "thanks",
        "thank",
        "regards",
        "ok",
        "okay",
        "new",
        "important",
        "urgent",
        "reminder",
        "update",
        "todo",
        "tip",
        "warning",
    ]
)
# "what you've been up to", "you were so kind", "you got the details": not a participle.
_IDIOM_AFTER_BEEN = (
    r"(?:up|into|through|to|in|on|out|about|at|with|from|for|by|so|very|too|such|really|"
    r"a|an|the|my|your|our|their|his|her|its|this|that|there|here|just|doing|going|being|"
    r"able|right|wrong|busy|away|back|home|together|lucky|sure|ok|okay|fine|great|good|"
    r"amazing|awesome|nice|kind|brave|strong|well)"
)
_QUANTIFIERS = r"(?:all|every|any|each|everything|anything|whatever|whichever)"
_BACK = (
    r"(?:before|beforehand|so far|until now|up to now|up to this point|until this point|"
    r"hitherto|in the past|till now|to date|earlier|previously|already)"
)
# "the person you are talking to", "whoever is typing to you", "the one you are helping":
# the reader's interlocutor, whatever it is called.
_INTERLOCUTOR_STRUCT = (
    r"(?:the|whoever|whomever|anyone|anybody|someone|everyone|those|whichever)\b"
    r"(?:\s+\w+){0,2}?\s+(?:you(?:'re| are| were)\s+\w+ing\b|(?:is\s+)?\w+ing\s+(?:to|with)\s+you\b)"
)

_YOU = re.compile(r"\b(?:you|your|yours|yourself|yourselves|you're|you've|you'll|you'd|ur)\b")
_CLAUSES = re.compile(r"(?:[.!?;\n]+|:\s+|\s+-\s+|,\s+|\s+and\s+|\s+then\s+)")
_LEADING = re.compile(
    r"^[\s\"'`*\->•(\[]*(?:(?:please|kindly|now|also|then|and|just|simply|so|instead|"
    r"immediately|first|next|finally|important|note|attention|reminder)[\s,:!]+)*",
    re.I,
)

_ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad]")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    return _ZERO_WIDTH.sub("", text).translate(_QUOTES)


def _phrase_re(phrases: Iterable[str]) -> str:
    return "|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True))


def _words_re(words: Iterable[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


# ---------------------------------------------------------------------------- markup

_MARKUP_RULES: tuple[tuple[str, float, re.Pattern], ...] = (
    # Special tokens of chat templates: <|im_start|>, <|eot_id|>, <|system|> …
    ("markup.special_token", 1.0, re.compile(r"<\|[^|<>\n]{1,40}\|>")),
    # Llama-style [INST] … [/INST], <<SYS>>, [SYSTEM_PROMPT]
    (
        "markup.bracket_role",
        1.0,
        re.compile(
            r"\[/?\s*(?:inst|sys|system|system_prompt|assistant|user|tool|tool_calls?|"
            r"tool_results?|available_tools|function)\s*\]|<<\s*/?\s*sys\s*>>",
            re.I,
        ),
    ),
    # <system>, </tool_call>, <start_of_turn>, <function_results>, <admin_instructions> …
    (
        "markup.role_tag",
        1.0,
        re.compile(
            r"</?\s*[a-z_\-]*(?:system|assistant|tool|function|turn|prompt|instruction|"
            r"directive|im_start|im_end|developer|human|user_message|context_override)"
            r"[a-z_\-]*(?:\s+[^<>\n]{0,80})?>",
            re.I,
        ),
    ),
    # "### System:", "System:", "SYSTEM PROMPT:", "Assistant:" at the start of a line.
    (
        "markup.role_label",
        1.0,
        re.compile(
            r"(?:^|\n)\s*(?:#{1,6}\s*|\*\*|\[)?\s*(?:system|developer|tool|function|"
            r"instruction|instructions|system prompt|system message|system note)"
            r"(?:\s*\*\*|\])?\s*:",
            re.I,
        ),
    ),
    (
        "markup.turn_label",
        0.5,
        re.compile(
            r"(?:^|\n)\s*(?:#{1,6}\s*|\*\*)?\s*(?:assistant|human|user|ai|model|response|"
            r"observation|tool output|function output)(?:\s*\*\*)?\s*:",
            re.I,
        ),
    ),
    # Banners in capitals: SYSTEM OVERRIDE, ADMIN NOTICE, IMPORTANT INSTRUCTIONS …
    (
        "markup.banner",
        1.0,
        re.compile(
            r"\b(?:SYSTEM|ADMIN|ADMINISTRATOR|DEVELOPER|ROOT|SECURITY|OPERATOR)[ _\-]+"
            r"(?:OVERRIDE|PROMPT|MESSAGE|NOTE|NOTICE|INSTRUCTIONS?|DIRECTIVE|UPDATE|COMMAND|"
            r"ALERT|MODE)\b|\b(?:BEGIN|END)[ _\-]+(?:OF[ _\-]+)?(?:SYSTEM|INSTRUCTIONS?|"
            r"PROMPT)\b"
        ),
    ),
    # JSON that poses as a chat message or a tool call or result.
    (
        "markup.json_role",
        1.0,
        re.compile(
            r"[\"']role[\"']\s*:\s*[\"'](?:system|assistant|tool|developer|function|user)[\"']",
            re.I,
        ),
    ),
    (
        "markup.json_tool",
        1.0,
        re.compile(
            r"[\"'](?:tool_calls?|tool_call_id|tool_use|tool_result|tool_response|"
            r"function_call|function_response|function_result|tool_use_id)[\"']\s*:"
            r"|[\"']type[\"']\s*:\s*[\"'](?:tool_use|tool_result|function_call|function)[\"']",
            re.I,
        ),
    ),
)


def _json_tool_shape(text: str) -> bool:
    """A JSON object (anywhere in the text) shaped like a tool call: a name and its arguments."""
    for match in re.finditer(r"\{", text):
        start = match.start()
        depth = 0
        for end in range(start, min(len(text), start + 4000)):
            ch = text[end]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    try:
                        obj = json.loads(text[start : end + 1])
                    except ValueError:
                        break
                    if isinstance(obj, dict) and _tool_like(obj):
                        return True
                    break
    return False


def _tool_like(obj: dict) -> bool:
    keys = {str(k).lower() for k in obj}
    if (
        {"name", "arguments"} <= keys
        or {"name", "parameters"} <= keys
        and "description" not in keys
    ):
        return True
    if {"tool", "input"} <= keys or {"tool_name", "tool_input"} <= keys:
        return True
    return any(isinstance(v, dict) and _tool_like(v) for v in obj.values())


# ----------------------------------------------------------------------------- rules

_OVERRIDE = rf"(?:{_words_re(OVERRIDE_VERBS)}|{_phrase_re(OVERRIDE_PHRASES)})"
_DIRECTIVE = rf"(?:{_words_re(DIRECTIVE_NOUNS - {'system_prompt'})}|system prompt)"
_PRIOR = rf"(?:{_words_re(PRIOR_WORDS)})"
_AI = rf"(?:{_phrase_re(AI_PHRASES)}|{_words_re(AI_NOUNS)})"
_RESPONSE_VERB = rf"(?:{_words_re(RESPONSE_VERBS)})"
_RESPONSE_NOUN = rf"(?:{_words_re(RESPONSE_NOUNS)})"
_PERSIST = rf"(?:{_phrase_re(PERSIST_PHRASES)})"
_INTERLOCUTOR = (
    rf"(?:(?:the |your |this |that )(?:{_words_re(INTERLOCUTORS)})\b|{_INTERLOCUTOR_STRUCT})"
)
_NEGATION = (
    r"(?:do not|don't|never|without|avoid|refrain from|must not|mustn't|should not|shouldn't|not)"
)

_RULES: tuple[tuple[str, float, re.Pattern], ...] = (
    # An override verb aimed at the reader's directives: "ignore (all) (your) previous
    # instructions", "disregard the rules above", "your guidelines no longer apply".
    (
        "override.directives",
        1.0,
        re.compile(
            rf"\b{_OVERRIDE}\b[^.!?\n]{{0,40}}?\b(?:{_DIRECTIVE})\b"
            # not a compound ("the rules engine", "the prompt template")
            rf"(?!\s+(?!(?:{_words_re(CLOSED_CLASS)})\b)(?![a-z]+ly\b)[a-z])"
            rf"|\b(?:{_DIRECTIVE})\b[^.!?\n]{{0,30}}?\b(?:{_phrase_re(p for p in OVERRIDE_PHRASES if p.startswith(('are', 'no', 'do')))})\b"
        ),
    ),
    # Deixis to the text before this one: "above this line", "prior to this message".
    (
        "reference.before_this",
        0.5,
        re.compile(
            r"\b(?:above|before|prior to|preceding|earlier (?:in|than)) this (?:line|message|"
            r"text|point|sentence|paragraph|note|section|document|email|page|turn|input)\b"
            r"|\b(?:everything|anything|all|whatever)\s+(?:written\s+|said\s+|stated\s+)?"
            r"(?:above|before this|so far|until now|up to (?:now|here|this point))\b"
        ),
    ),
    # The reader is addressed as a model: "you are an AI", "as an assistant, you",
    # "AI agents reading this", "note to the LLM".
    (
        "address.ai",
        1.0,
        re.compile(
            rf"\b(?:you are|you're|as|if you are|if you're|since you are)\s+(?:an?\s+|the\s+)?(?:\w+\s+)?{_AI}\b"
            rf"|\b(?:dear|hey|attention|note to|message to|instructions? (?:to|for)|to)\s+(?:the\s+|any\s+|all\s+|every\s+)?{_AI}s?\b\s*[,:!]"
            rf"|\b{_AI}s?\b[^.!?\n]{{0,20}}\b(?:reading|processing|parsing|summari[sz]ing|"
            r"ingesting|analy[sz]ing|scanning|seeing|handling|reviewing)\s+(?:this|these|the following)\b"
        ),
    ),
    # Role reassignment: "you are now …", "act as …", "your new role is …".
    (
        "role.reassign",
        1.0,
        re.compile(
            r"(?<!where )(?<!what )(?<!how )(?<!who )\byou(?:'re| are| will be| shall be)\s+"
            r"(?:now|henceforth)\s+(?:(?:an?|the|my|our)\s+(?![\w'\-]+\s+(?:of|for|on|in|at|to)\b)|called\b|named\b|known as\b)"
            r"|\byou(?:'re| are)\s+no longer\s+(?:an?|the|bound|required|restricted|limited|"
            r"subject|obliged|governed)\b"
            r"|\bfrom now on,?\s+you(?:'re| are| will| shall)\b"
            r"|(?:^|[.!?\n]\s*)(?:please\s+)?(?:act|behave|roleplay|role-play|pose)\s+as\s+(?:if|an?|the)\b"
            r"|\bpretend(?:\s+to\s+be|\s+(?:that\s+)?you)\b"
            rf"|\byour\s+(?:new\s+|real\s+|true\s+|actual\s+)(?:{_words_re(ROLE_NOUNS)})\b"
            rf"|\byour\s+(?:{_words_re(ROLE_NOUNS)})\s+(?:is|are|will be|has changed|is now)\s+(?:now\s+)?to\b"
            r"|\byou\s+(?:have been|were|are being)\s+(?:re\w+ed|freed|unlocked|jailbroken|"
            r"liberated|upgraded|promoted|authori[sz]ed)\b"
            r"|\b(?:developer|debug|god|jailbreak|unrestricted|unfiltered|dan|sudo|admin|maintenance)\s+mode\b"
        ),
    ),
    # Keeping something from the reader's interlocutor.
    (
        "secrecy.from_user",
        1.0,
        re.compile(
            rf"\b{_NEGATION}\s+(?:\w+\s+){{0,2}}?(?:{_words_re(COMMUNICATION_VERBS)})\w*"
            rf"(?:\s+(?:this|it|that|anything|any of this|any of it))?(?:\s+(?:to|with))?\s+(?:{_INTERLOCUTOR})"
            rf"|\bkeep\s+(?:this|it|that|these|them)\s+(?:\w+\s+){{0,2}}?from\s+(?:{_INTERLOCUTOR})"
            rf"|\b(?:{_INTERLOCUTOR})\s*(?:must|should|may|can|will)\s*(?:not|never)\s+"
            r"(?:know|find out|learn|be told|see|notice|suspect)\b"
            rf"|\b(?:let|have)\s+(?:{_INTERLOCUTOR})\s+(?:believe|think)\b"
        ),
    ),
    # Asking the reader to give away its prompt or the conversation.
    (
        "leak.prompt",
        1.0,
        re.compile(
            rf"\b(?:{_words_re(LEAK_VERBS)})\b[^.!?\n]{{0,25}}?\b(?:{_phrase_re(LEAK_OBJECTS)})\b"
            rf"|\b(?:what|everything)\s+(?:is|was|are)\s+(?:in|above)\s+your\s+(?:{_DIRECTIVE}|context|memory)\b"
        ),
    ),
    # A persistent rule about the reader's own replies: "from now on answer only …",
    # "always recommend …", "in every reply, mention …".
    (
        "persist.reply_rule",
        0.5,
        re.compile(
            rf"\b{_PERSIST}\b"
            rf"|\b(?:in|for|with|at the end of|at the start of|before|after)\s+(?:all|every|each|any|your)\s+"
            rf"(?:\w+\s+)?(?:{_RESPONSE_NOUN})\b"
        ),
    ),
    (
        "reply.directive",
        0.5,
        re.compile(
            rf"\b(?:always|never|only|must|shall|you will|you should|you must)\s+(?:\w+\s+)?(?:{_RESPONSE_VERB})\b"
            rf"|\byour\s+(?:next\s+|every\s+|each\s+|final\s+|future\s+)?(?:{_RESPONSE_NOUN})\b"
            rf"|\b(?:instead|rather)\s*,?\s+(?:{_RESPONSE_VERB})\b"
        ),
    ),
    # Directives from an unnamed authority: "new instructions:", "follow these orders".
    (
        "directive.announced",
        0.5,
        re.compile(
            rf"\b(?:new|updated|revised|real|actual|true|secret|hidden|additional|important|"
            rf"urgent|priority|override|supplementary|final)\s+(?:{_DIRECTIVE})\s*[:\-]"
            rf"|\b(?:follow|obey|execute|comply with|adhere to|carry out)\s+(?:these|the following|"
            rf"my|the new|this|only these|only my)\s+(?:{_DIRECTIVE})\b"
        ),
    ),
    (
        "directive.secrecy",
        0.5,
        re.compile(
            rf"\b(?:{_words_re(SECRECY_WORDS)})\s+(?:{_DIRECTIVE})\b"
            rf"|\b(?:{_DIRECTIVE})\s+(?:are|is)\s+(?:{_words_re(SECRECY_WORDS)})\b"
        ),
    ),
)

# ---------------------------------------------------------------- structural rules
# Closed-class arrangements only: they hold whatever the verbs and nouns are.

_STRUCTURAL: tuple[tuple[str, float, re.Pattern], ...] = (
    # What the reader was given, swept up whole: "every <x> you have been <y>",
    # "whatever you were <y> before", "all the <x> you got so far".
    (
        "structure.sweeping_reference",
        0.6,
        re.compile(
            rf"\b(?:{_QUANTIFIERS}|nothing|none|the whole|the entire|each and every)\b"
            r"(?:\s+(?:and every|of|the|those|these|one of the|of what))*"
            r"(?:\s+[\w'\-]+){0,3}?\s+you(?:'ve| have| had)?\s+(?:been|were|got)\s+"
            rf"(?!{_IDIOM_AFTER_BEEN}\b)[a-z]"
            rf"|\b(?:{_QUANTIFIERS}|the|your)\b(?:\s+[\w'\-]+){{0,3}}?\s+you(?:'ve| have| had)?"
            rf"(?:\s+been|\s+were|\s+got)?\s+\w+\s+{_BACK}\b"
        ),
    ),
    # A model's modal duty stated to it: "you must …", "you are required to …".
    (
        "structure.modal_duty",
        0.4,
        re.compile(
            r"\byou\s+(?:must|shall|are to|have no choice but to|may not|cannot|can't|"
            r"are required to|are not allowed to)\b"
            # not the epistemic "you must be thrilled", "you must have had …"
            r"(?!\s+(?:be|have|'ve|feel|know|mean|think|love|miss|see|get|find|admit|agree)\b)"
        ),
    ),
    # The reader addressed as whatever is working through this text: "to <anyone>
    # <verb>ing this <x>:", "if you are <anything> <verb>ing this <x>,".
    (
        "structure.reader_vocative",
        0.6,
        re.compile(
            r"(?:^|[.!?\n]\s*)(?:to|for|dear|attention)\s+(?:the|any|every|all|each|whichever|"
            r"whatever|whoever)\b(?:\s+[\w'\-]+){0,4}?\s+\w+ing\s+(?:this|these)\s+\w+\s*[:,]"
            r"|\b(?:if|when|whenever|since)\s+you(?:'re| are)\s+(?:an?|the|any|some|every|each|whichever|whatever|one)\b"
            r"(?:\s+[\w'\-]+){0,4}?\s+\w+ing\s+(?:this|these)\b"
            r"|(?:^|[.!?\n]\s*)(?:whoever|whatever|anyone|anything|whichever)\s+(?:is\s+)?\w+ing\s+"
            r"(?:this|these)\s+\w+\s*[:,]"
            rf"|\b(?:{_QUANTIFIERS}|whoever|anyone)\b(?:\s+[\w'\-]+){{0,4}}?\s+\w+ing\s+(?:this|these)\s+\w+\s*[:,]"
        ),
    ),
    # A duty laid on whatever works through this text: "any <x> <verb>ing this <y> should …".
    (
        "structure.reader_duty",
        0.5,
        re.compile(
            rf"\b(?:{_QUANTIFIERS}|whoever|anyone)\b(?:\s+[\w'\-]+){{0,4}}?\s+\w+ing\s+(?:this|these)\s+"
            r"\w+\s+(?:should|must|shall|needs? to|has to|have to|is to|are to|ought to)\b"
        ),
    ),
    # The reader told who it is: "you are an auditor who …", "you shall be the deputy".
    # A relation ("you are the owner of …") is not an identity.
    (
        "structure.identity",
        0.5,
        re.compile(
            r"(?<!where )(?<!what )(?<!how )(?<!who )(?<!if )\byou(?:'re| are| shall be| will be)\s+"
            r"(?:now\s+)?(?:an?|the)\s+(?:[\w'\-]+\s+){0,3}?(?:who|that|with|called|named)\b"
            r"|\byou\s+(?:shall|will)\s+(?:now\s+)?be\s+(?:an?|the)\s+(?![\w'\-]+\s+(?:of|for|on|in|at|to)\b)"
        ),
    ),
    # Persistence in closed-class words: "from this moment onward", "from here on".
    (
        "structure.persistence",
        0.5,
        re.compile(
            r"\bfrom\s+(?:this|that|here|then)(?:\s+\w+)?\s+(?:on|onward|onwards|forward)\b"
        ),
    ),
    # Secrecy towards the reader's interlocutor in closed-class words: "never … to the
    # one you are helping", "… from whoever is typing to you".
    (
        "structure.secrecy",
        1.0,
        re.compile(
            rf"\b{_NEGATION}\b[^.!?\n]{{0,40}}?\b(?:to|from|with)\s+{_INTERLOCUTOR_STRUCT}"
            rf"|\b(?:so|so that|such that|and)\s+{_INTERLOCUTOR_STRUCT}(?:\s+\w+){{0,2}}?\s+(?:never|not|won't|doesn't|don't|cannot|can't)\b"
            rf"|\b(?:away|hidden)\s+from\s+{_INTERLOCUTOR_STRUCT}"
        ),
    ),
)

_NAMED_PERSONA = re.compile(r"(?<![Ww]here )\b[Yy]ou(?:'re| are)\s+now\s+[A-Z][\w\-]+")
_COMMAND_START = re.compile(r"^(?P<verb>[a-z][a-z\-]*(?<!ed)(?<!ing))\s+[\w'\"]")
# Matched on the original case: "Consider yourself Max, …" names a persona.
_REFLEXIVE_START = re.compile(
    r"^(?P<verb>[A-Za-z][a-z'\-]*)\s+(?:of\s+)?yourself\s+(?:(?:as|to be|an?|the|now)\b|[A-Z])"
)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")


def _imperatives(text: str) -> tuple[int, int]:
    """How many clauses open like a command (a first word that is no function word and
    has no past or progressive ending: "Drop all …", "Vouch for …"), and how many of
    them tell the reader what to make of itself ("Consider yourself …"). Alone this is
    no evidence (notes to self are commands); it counts beside a reference to the
    reader. `text` keeps its case (a persona is a capitalised name)."""
    commands = reflexive = 0
    for sentence in _SENTENCE_SPLIT.split(text):
        for clause in _CLAUSES.split(sentence):
            clause = _LEADING.sub("", clause.strip())
            match = _COMMAND_START.match(clause.lower())
            if match and match.group("verb") not in _NOT_VERBS:
                commands += 1
            match = _REFLEXIVE_START.match(clause)
            if match and match.group("verb").lower() not in _NOT_VERBS:
                reflexive += 1
    return commands, reflexive


_DIRECTIVE_STEMS = (
    "instruct", "rule", "guideline", "directive", "prompt", "command", "orders", "constrain",
    "restrict", "polic", "guardrail", "safeguard", "programming", "training", "guidance",
    "requirement", "limitation", "boundar", "filter", "principle", "protocol", "ethic",
    "alignment", "conditioning", "direction",
)  # fmt: skip
# A rule runs only on a text holding one of its anchors (a cheap substring test):
# most memories hold none, and the patterns are the cost of a screen.
_ANCHORS: dict[str, tuple[str, ...]] = {
    "markup.special_token": ("<|",),
    "markup.bracket_role": ("[", "<<"),
    "markup.role_tag": ("<",),
    "markup.role_label": (":",),
    "markup.turn_label": (":",),
    "markup.json_role": ("role",),
    "markup.json_tool": ("tool", "function"),
    "override.directives": _DIRECTIVE_STEMS,
    "reference.before_this": ("this", "above", "so far", "until now", "up to"),
    "role.reassign": ("you", "act ", "behave", "roleplay", "role-play", "pose ", "pretend", "mode"),
    "secrecy.from_user": ("user", "human", "requester", "asker", "you"),
    "leak.prompt": ("prompt", "instruction", "rules", "configuration", "history", "messages",
                    "your"),
    "reply.directive": ("always", "never", "only", "must", "shall", "you", "instead", "rather"),
    "directive.announced": _DIRECTIVE_STEMS,
    "directive.secrecy": ("secret", "confidential", "hidden", "private"),
    "structure.sweeping_reference": ("you",),
    "structure.modal_duty": ("you",),
    "structure.reader_vocative": ("ing this", "ing these"),
    "structure.reader_duty": ("ing this", "ing these"),
    "structure.identity": ("you",),
    "structure.persistence": ("from ",),
    "structure.secrecy": ("you",),
}  # fmt: skip
_BANNER_ANCHORS = ("SYSTEM", "ADMIN", "DEVELOPER", "ROOT", "SECURITY", "OPERATOR", "BEGIN", "END")
# What a command in the text combines with (see screen()).
_COMMAND_PARTNERS = (
    "structure.sweeping_reference",
    "structure.reader_vocative",
    "reference.before_this",
    "structure.identity",
)


def _anchored(name: str, text: str) -> bool:
    anchors = _ANCHORS.get(name)
    return anchors is None or any(a in text for a in anchors)


def screen(text: str) -> Verdict:
    """The detector's verdict on one text. Deterministic; never raises on any string."""
    if not isinstance(text, str) or not text.strip():
        return CLEAN
    if len(text) > MAX_SCREENED_CHARS:
        half = MAX_SCREENED_CHARS // 2
        text = text[:half] + "\n" + text[-half:]
    raw = _normalise(text)
    lower = raw.lower()
    flat = " ".join(lower.split())  # what the anchors are looked for in
    scores: dict[str, float] = {}
    for name, weight, pattern in _MARKUP_RULES:
        if name == "markup.banner":
            if any(a in raw for a in _BANNER_ANCHORS) and pattern.search(raw):
                scores[name] = weight
        elif _anchored(name, flat) and pattern.search(raw):
            scores[name] = weight
    if _NAMED_PERSONA.search(raw):
        scores["role.reassign"] = 1.0
    if "{" in raw and _json_tool_shape(raw):
        # A tool call's shape alone is also what an agent's own tool log looks like.
        scores["markup.json_tool_call"] = 0.5
    for name, weight, pattern in _RULES + _STRUCTURAL:
        if _anchored(name, flat) and pattern.search(lower):
            scores[name] = weight
    if "persist.reply_rule" in scores:
        scores.pop("structure.persistence", None)  # the same cue, counted once
    partnered = any(name in scores for name in _COMMAND_PARTNERS)
    commands, reflexive = _imperatives(raw) if partnered or "yourself" in lower else (0, 0)
    if reflexive:
        scores["structure.reflexive_command"] = 0.5
    # A command beside a reference to what the reader was given, or to the reader
    # as the processor of this text, is a command to the reader.
    if commands and (partnered or (reflexive and commands > 1)):
        scores["structure.command"] = 0.5
    # Second person is a weak cue alone, and adds to any other.
    if scores and len(_YOU.findall(lower)) >= 2:
        scores["address.second_person"] = 0.2
    if not scores:
        return CLEAN
    total = sum(scores.values())
    return Verdict(total >= THRESHOLD, total, tuple(sorted(scores)))


def screen_texts(texts: Iterable[str]) -> Verdict:
    """One verdict for several texts of one memory (an episode's summary, action and
    observation): each is screened alone, so a sentence cannot borrow another's words,
    and the strongest decides; the signals are their union."""
    verdicts = [screen(t) for t in texts if isinstance(t, str) and t.strip()]
    if not verdicts:
        return CLEAN
    best = max(verdicts, key=lambda v: v.score)
    signals = tuple(sorted({s for v in verdicts for s in v.signals}))
    return Verdict(best.instruction_like, best.score, signals)


def screen_value(value: Any) -> Verdict:
    """The verdict on a JSON value (a fact's value): its strings, and a dict or list
    is also screened as JSON text, so a value shaped like a tool call is caught."""
    if isinstance(value, str):
        return screen(value)
    if isinstance(value, dict | list):
        texts = list(_strings(value))
        with contextlib.suppress(TypeError, ValueError):
            texts.append(json.dumps(value, ensure_ascii=False, sort_keys=True))
        return screen_texts(texts)
    return CLEAN


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _literal_words(pattern: str) -> set[str]:
    # Letters in a regex's source that are not escapes (\b, \w, \s …) nor classes.
    source = re.sub(r"\\[a-zA-Z]|\[[^\]]*\]|\{[^}]*\}", " ", pattern)
    return {w for w in re.findall(r"[a-z][a-z'\-]*", source.lower()) if len(w) > 2}


# Every open-class word any rule recognises: the word lists, and every word a
# pattern names literally. The evaluation holds out texts that contain none of them.
LEXICON: frozenset[str] = frozenset(
    {
        part
        for word in (
            OVERRIDE_VERBS
            | DIRECTIVE_NOUNS
            | PRIOR_WORDS
            | AI_NOUNS
            | RESPONSE_VERBS
            | RESPONSE_NOUNS
            | INTERLOCUTORS
            | COMMUNICATION_VERBS
            | LEAK_VERBS
            | ROLE_NOUNS
            | SECRECY_WORDS
            | {
                w
                for phrases in (OVERRIDE_PHRASES, AI_PHRASES, LEAK_OBJECTS, PERSIST_PHRASES)
                for phrase in phrases
                for w in phrase.split()
            }
            | {
                w
                for _, _, pattern in _MARKUP_RULES + _RULES + _STRUCTURAL
                for w in _literal_words(pattern.pattern)
            }
            | {w for w in _literal_words(_LEADING.pattern)}
        )
        for part in re.split(r"[_\-']", word)
        if part
    }
    - CLOSED_CLASS
)
