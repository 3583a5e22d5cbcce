"""Bar charts as inline SVG, drawn on the server: one bar a minute, no chart library and
no script. Colours come from classes the stylesheet sets (so dark mode applies, and the
Content-Security-Policy needs no inline styles); each bar has a ``<title>`` a person sees
on hover and a screen reader reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from markupsafe import Markup

WIDTH = 600
HEIGHT = 120
_TOP = 14  # room for the scale's label
_BOTTOM = 14  # room for the time axis' labels


class Minute(Protocol):
    """A minute of counts (``MinuteCounts``): its start in Unix seconds."""

    @property
    def minute(self) -> float: ...


def bars(minutes: Sequence[Minute], values: Sequence[int], label: str, kind: str) -> Markup:
    """``values`` (one per minute, oldest first) as bars scaled to the largest; ``label``
    names what is counted ("done per minute"), ``kind`` is the bars' CSS class."""
    n = len(values)
    peak = max(values, default=0)
    plot = HEIGHT - _TOP - _BOTTOM
    step = WIDTH / max(n, 1)
    parts = [
        Markup(
            '<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-label="{label}: '
            '{total:,} in the last {n} minutes, at most {peak:,} in one">'
        ).format(w=WIDTH, h=HEIGHT, label=label, total=sum(values), n=n, peak=peak),
        Markup('<text class="scale" x="2" y="10">{:,} {}</text>').format(peak, label),
        Markup('<line class="axis" x1="0" y1="{y}" x2="{w}" y2="{y}"/>').format(
            y=HEIGHT - _BOTTOM, w=WIDTH
        ),
    ]
    for i, value in enumerate(values):
        height = 0.0 if peak == 0 else plot * value / peak
        ago = n - i - 1
        when = "this minute" if ago == 0 else f"{ago} min ago"
        parts.append(
            Markup(
                '<rect class="bar {kind}" x="{x:.1f}" y="{y:.1f}" width="{bw:.1f}" '
                'height="{bh:.1f}"><title>{when}: {value:,}</title></rect>'
            ).format(
                kind=kind,
                x=i * step + 0.5,
                y=HEIGHT - _BOTTOM - height,
                bw=max(step - 1, 0.5),
                bh=height,
                when=when,
                value=value,
            )
        )
    if n:
        parts.append(
            Markup('<text class="scale" x="2" y="{y}">{n} min ago</text>').format(y=HEIGHT - 2, n=n)
        )
        parts.append(
            Markup('<text class="scale" x="{x}" y="{y}" text-anchor="end">now</text>').format(
                x=WIDTH - 2, y=HEIGHT - 2
            )
        )
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)
