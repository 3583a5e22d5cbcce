"""The public names: what SPEC.md promises is importable from ``sqljobs``, and ``__all__``
stays sorted so additions are easy to review."""

from __future__ import annotations

import sqljobs


def test_all_is_sorted_and_importable() -> None:
    assert list(sqljobs.__all__) == sorted(sqljobs.__all__)
    for name in sqljobs.__all__:
        assert getattr(sqljobs, name) is not None


def test_the_spec_names_exist() -> None:
    for name in ("App", "JobContext", "Retry", "idempotent"):
        assert name in sqljobs.__all__
    app = sqljobs.App("sqlite:///unused.db")
    for method in ("task", "enqueue", "stats", "run_worker"):
        assert callable(getattr(app, method))
