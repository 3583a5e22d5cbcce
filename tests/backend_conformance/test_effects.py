"""External effects: an intent recorded and held by one holder, its outcome, and an intent
forgotten when its call failed for certain."""

from __future__ import annotations

from sqljobs.backends import Backend
from sqljobs.backends.base import EffectEnd, EffectIntent

COVERS = {"effect_begin", "effect_set", "effect_forget"}


def test_one_holder_at_a_time_and_the_outcome_is_kept(backend: Backend) -> None:
    first = backend.effect_begin(EffectIntent("charge-1", None, "a", 60.0))
    assert first.mine and first.state == "pending" and first.attempts == 1
    other = backend.effect_begin(EffectIntent("charge-1", None, "b", 60.0))
    assert not other.mine, "held by a"
    backend.effect_set(EffectEnd("charge-1", "a", "done", '{"id": 7}'))
    done = backend.effect_begin(EffectIntent("charge-1", None, "b", 60.0))
    assert done.state == "done" and done.result == '{"id": 7}'


def test_an_uncertain_outcome_and_a_forgotten_intent(backend: Backend) -> None:
    backend.effect_begin(EffectIntent("mail-1", None, "a", 0.0))
    backend.effect_set(EffectEnd("mail-1", "a", "unknown", error="TimeoutError: slow"))
    again = backend.effect_begin(EffectIntent("mail-1", None, "b", 60.0))
    assert again.mine and again.attempts == 2 and again.error == "TimeoutError: slow"
    backend.effect_begin(EffectIntent("sms-1", None, "a", 60.0))
    backend.effect_forget("sms-1", "a")
    fresh = backend.effect_begin(EffectIntent("sms-1", None, "c", 60.0))
    assert fresh.mine and fresh.attempts == 1, "a forgotten intent starts over"
