"""Simulated customers: a deterministic scripted user and an LLM user over the `openai` client.

A user is stateless: ``reply(instruction, history)`` maps the task instruction and the
conversation so far — ``(speaker, text)`` pairs, speaker ``"user"`` or ``"agent"``, ending with
the agent's latest message, or empty for the opening message — to the user's next message. The
conversation lives in the environment's snapshot, so restoring a snapshot restores the user.
A user ends the conversation by saying ``###STOP###``.

:class:`ScriptedUser` is for offline runs and tests: it opens with the instruction in the first
person, answers requests for identifying information with what the instruction states, confirms
anything it is asked to confirm, and stops when the agent's message asks nothing. It does not
play the instruction's conditional twists; it is a stand-in, not the benchmark's user.

:class:`LLMUser` plays the customer with a chat model behind any OpenAI-compatible endpoint, as
the benchmark does: the system prompt holds the instruction, the agent speaks in the ``user``
role and the simulated customer in the ``assistant`` role, and the agent's first words are a
fixed greeting. Its replies are as deterministic as the endpoint (temperature 0 by default).
An endpoint failure raises :class:`UserError`, before the environment changes any state, so the
step can be retried or the episode restored elsewhere.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any, Protocol

import openai

STOP = "###STOP###"
GREETING = "Hi! How can I help you today?"
History = Sequence[tuple[str, str]]


class User(Protocol):
    """A simulated customer."""

    def reply(self, instruction: str, history: History) -> str:
        """The user's next message (``history`` empty: the opening message)."""
        ...


class UserError(RuntimeError):
    """The simulated user could not produce a message (for example, its endpoint failed)."""


# --- the scripted user ------------------------------------------------------------------------

_PRONOUNS = [
    (r"you are", "I am"), (r"you were", "I was"), (r"you're", "I'm"), (r"you've", "I've"),
    (r"you'd", "I'd"), (r"you'll", "I'll"), (r"yourself", "myself"), (r"yours", "mine"),
    (r"your", "my"),
    (r"(to|for|with|asks?|tells?|gives?|helps?|offers?|than) you", r"\1 me"),
    (r"you", "I"),
]
_PRONOUN_PATTERNS = [(re.compile(rf"\b{p}\b", re.IGNORECASE), r) for p, r in _PRONOUNS]


def first_person(text: str) -> str:
    """The instruction as the user would say it: second person turned into first person."""
    for pattern, replacement in _PRONOUN_PATTERNS:
        text = pattern.sub(lambda m, r=replacement: _keep_case(m, m.expand(r)), text)
    return text


def _keep_case(match: re.Match, replacement: str) -> str:
    if match.group(0)[0].isupper() and not replacement.startswith("I"):
        return replacement[0].upper() + replacement[1:]
    return replacement


@dataclasses.dataclass(frozen=True)
class Facts:
    """Identifying information an instruction states."""

    name: str | None
    zip: str | None
    email: str | None
    user_id: str | None
    order_ids: tuple[str, ...]
    reservation_ids: tuple[str, ...]


def _first(pattern: str, text: str) -> str | None:
    match = re.search(pattern, text)
    return match.group(1) if match else None


def facts(instruction: str) -> Facts:
    """The name, zip code, email, user id, order and reservation ids in ``instruction``."""
    return Facts(
        name=_first(r"(?:You are|Your name is)\s+([A-Z][a-z]+(?: [A-Z][a-z]+)+)", instruction),
        zip=_first(r"(?:zip code is|\bin)\s+(\d{5})\b", instruction),
        email=_first(r"([\w.+-]+@[\w-]+(?:\.[\w-]+)+)", instruction),
        user_id=_first(r"\b([a-z]+(?:_[a-z]+)+_\d+)\b", instruction),
        order_ids=tuple(dict.fromkeys(re.findall(r"#W\d+", instruction))),
        reservation_ids=tuple(dict.fromkeys(re.findall(
            r"\b(?!HAT\d)(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{6}\b", instruction))),
    )


_ASKED = {  # "your ..." so that a quoted argument name ("zip": ...) is not a question
    "name": re.compile(r"\byour (?:full |first |last )?name\b"),
    "zip": re.compile(r"\byour (?:\w+ ){0,3}(?:zip|postal)\b"),
    "email": re.compile(r"\byour (?:\w+ ){0,3}e-?mail\b"),
    "user_id": re.compile(r"\byour user ?id\b"),
    "order": re.compile(r"\b(?:your|the) order (?:id|number)s?\b"),
    "reservation": re.compile(r"\b(?:your|the) reservation (?:id|number|code)s?\b"),
}
_REQUEST = re.compile(r"\?|\b(?:provide|share|tell me|let me know)\b")
_CONFIRM = re.compile(r"\b(?:confirm|yes/no|yes or no|proceed|go ahead|shall i|should i|"
                      r"would you like me to)\b")
_ANYTHING_ELSE = re.compile(r"\banything else\b")


def _statements(known: Facts) -> dict[str, str]:
    """What the user can say about each kind of identifying information it knows."""
    statements = {
        "name": known.name and f"My name is {known.name}.",
        "zip": known.zip and f"My zip code is {known.zip}.",
        "email": known.email and f"My email is {known.email}.",
        "user_id": known.user_id and f"My user id is {known.user_id}.",
        "order": known.order_ids and f"The order id is {', '.join(known.order_ids)}.",
        "reservation": known.reservation_ids and (
            f"The reservation id is {', '.join(known.reservation_ids)}."),
    }
    return {kind: text for kind, text in statements.items() if text}


def identify(known: Facts, asked: Sequence[str]) -> str:
    """The user's answer to a request for the kinds of information in ``asked``."""
    statements = _statements(known)
    answers = [statements[kind] for kind in asked if kind in statements]
    if answers:
        return " ".join(answers)
    offered = [statements[k] for k in ("email", "user_id", "name", "zip") if k in statements]
    if offered:
        return "I don't remember that. " + " ".join(offered)
    return "I don't have that information."


class ScriptedUser:
    """The deterministic offline user (see the module docstring)."""

    def reply(self, instruction: str, history: History) -> str:
        """The opening (empty ``history``) or the answer to the agent's latest message."""
        if not history:
            return "Hi! " + first_person(instruction)
        message = history[-1][1].lower()
        if _REQUEST.search(message):
            asked = [kind for kind, pattern in _ASKED.items() if pattern.search(message)]
            if asked:
                return identify(facts(instruction), asked)
        if _CONFIRM.search(message):
            return "Yes, please go ahead."
        if _ANYTHING_ELSE.search(message) or "?" not in message:
            return STOP
        return "I have told you what I need. Please go ahead with my request."


# --- the LLM user -----------------------------------------------------------------------------

def system_prompt(instruction: str) -> str:
    """The LLM user's system prompt for one task."""
    return (
        "You play a customer talking to a customer-service agent. Your goal, and everything "
        f"you know, is:\n\n{instruction}\n\n"
        "How to play:\n"
        "- Write only the customer's next message, one short message at a time.\n"
        "- Give information only when the current step needs it, never all at once.\n"
        "- Never make up facts (names, ids, emails, numbers) that your goal does not give; "
        "if asked for one, say that you do not know or do not remember it.\n"
        "- Say things in your own words instead of repeating your goal verbatim, and keep the "
        "personality your goal describes.\n"
        f"- When your goal is fully handled, reply with {STOP} alone to end the conversation."
    )


def chat_messages(instruction: str, history: History) -> list[dict[str, str]]:
    """The chat-completion messages for the LLM user: roles swapped, as the benchmark does."""
    messages = [{"role": "system", "content": system_prompt(instruction)},
                {"role": "user", "content": GREETING}]
    for speaker, text in history:
        messages.append({"role": "assistant" if speaker == "user" else "user", "content": text})
    return messages


class LLMUser:
    """A customer played by a chat model behind an OpenAI-compatible ``base_url``.

    Picklable: the client is made on first use and is not pickled (nor is a custom
    ``http_client``, which is for tests), so it can be configured in one process and used in an
    environment worker.
    """

    def __init__(self, base_url: str, model: str, api_key: str = "EMPTY",
                 temperature: float = 0.0, max_tokens: int | None = 512,
                 seed: int | None = None, timeout: float = 60.0, max_retries: int = 2,
                 http_client: Any = None):
        self.base_url, self.model, self.api_key = base_url, model, api_key
        self.temperature, self.max_tokens, self.seed = temperature, max_tokens, seed
        self.timeout, self.max_retries, self.http_client = timeout, max_retries, http_client
        self._client: openai.OpenAI | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "http_client": None}

    @property
    def client(self) -> openai.OpenAI:
        """The `openai` client (made on first use)."""
        if self._client is None:
            self._client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key,
                                         timeout=self.timeout, max_retries=self.max_retries,
                                         http_client=self.http_client)
        return self._client

    def reply(self, instruction: str, history: History) -> str:
        """One chat completion; raises UserError when the endpoint fails or says nothing."""
        options = {"temperature": self.temperature}
        if self.max_tokens is not None:
            options["max_tokens"] = self.max_tokens
        if self.seed is not None:
            options["seed"] = self.seed
        try:
            completion = self.client.chat.completions.create(
                model=self.model, messages=chat_messages(instruction, history), **options)
        except openai.OpenAIError as error:
            raise UserError(f"the simulated user's endpoint {self.base_url} failed: "
                            f"{type(error).__name__}: {error}") from error
        content = completion.choices[0].message.content if completion.choices else None
        if not content:
            raise UserError(f"the simulated user's endpoint {self.base_url} returned no text")
        return content
