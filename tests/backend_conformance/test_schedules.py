"""Periodic schedules as stored: saving, reading, pausing, the ticks that replicas race
for, and a run now."""

from __future__ import annotations

from sqljobs.backends import Backend
from sqljobs.schedules import Schedule, Tick

from .conftest import new_job

COVERS = {
    "save_schedule",
    "get_schedule",
    "list_schedules",
    "delete_schedule",
    "pause_schedule",
    "resume_schedule",
    "upcoming_schedules",
    "fire_schedule",
    "run_schedule_now",
}


def test_a_schedule_is_saved_read_paused_and_deleted(backend: Backend) -> None:
    now = backend.now()
    saved = backend.save_schedule(Schedule("nightly", "t", every=60.0), now + 60)
    assert saved.name == "nightly" and abs(saved.next_run_at - (now + 60)) < 0.01
    kept = backend.save_schedule(Schedule("nightly", "t", every=60.0, priority=5), now + 999)
    assert abs(kept.next_run_at - (now + 60)) < 0.01, "same timing: its next run is kept"
    backend.save_schedule(Schedule("hourly", "t", every=3600.0), now + 3600)
    assert [s.name for s in backend.list_schedules()] == ["hourly", "nightly"]
    assert [s.name for s in backend.upcoming_schedules(1)] == ["nightly"]
    assert backend.pause_schedule("nightly")
    state = backend.get_schedule("nightly")
    assert state is not None and state.paused and state.schedule.priority == 5
    assert [s.name for s in backend.upcoming_schedules(5)] == ["hourly"]
    assert backend.resume_schedule("nightly", now + 30)
    resumed = backend.get_schedule("nightly")
    assert resumed is not None and not resumed.paused
    assert backend.delete_schedule("nightly") and not backend.delete_schedule("nightly")
    assert backend.get_schedule("nightly") is None


def test_of_replicas_firing_one_tick_exactly_one_enqueues(backend: Backend) -> None:
    now = backend.now()
    state = backend.save_schedule(Schedule("every", "t", every=60.0), now)
    tick = Tick("every", state.next_run_at, now + 60, now, new_job(backend, "t", key="tick"), "ok")
    first, second = backend.fire_schedule(tick), backend.fire_schedule(tick)
    assert first.claimed and first.job_id is not None and first.created
    assert not second.claimed
    moved = backend.get_schedule("every")
    assert moved is not None and abs(moved.next_run_at - (now + 60)) < 0.01


def test_a_run_now_obeys_overlap_skip(backend: Backend) -> None:
    now = backend.now()
    backend.save_schedule(Schedule("once", "t", every=60.0, overlap="skip"), now + 60)
    assert backend.run_schedule_now("missing", new_job(backend, "t")) is None
    ran = backend.run_schedule_now("once", new_job(backend, "t", key="now-1"))
    assert ran is not None and ran.job_id is not None and ran.created
    again = backend.run_schedule_now("once", new_job(backend, "t", key="now-2"))
    assert again is not None and again.outcome == "skipped_overlap", "its first run is pending"
    assert again.job_id == ran.job_id and not again.created
