"""What an experiment found, and the three ways to show it: a rich table, JSON, a PNG."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

Progress = Callable[[float], None]
"""Told the fraction of an experiment done so far (0..1)."""


def no_progress(_fraction: float) -> None:
    """For callers that show no progress bar (tests)."""


@dataclass
class Row:
    """One variant: our measured figures and, beside them, the article's."""

    variant: str
    ours: dict[str, Any]
    article: dict[str, Any] = field(default_factory=dict)
    broken: bool = False


@dataclass
class Claim:
    """A structural statement that must hold, e.g. "0 duplicates (article 0)"."""

    text: str
    held: bool


@dataclass
class Result:
    """One experiment's table, claims and notes."""

    id: str
    title: str
    setup: str
    columns: list[str]
    rows: list[Row] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    chart: str | None = None  # the column plotted by --charts
    seconds: float = 0.0

    def row(self, variant_prefix: str) -> Row:
        """The row whose variant starts with ``variant_prefix`` (e.g. "B3")."""
        for r in self.rows:
            if r.variant.startswith(variant_prefix):
                return r
        raise KeyError(variant_prefix)

    def claim(self, text: str, held: bool) -> bool:
        self.claims.append(Claim(text, bool(held)))
        return bool(held)

    @property
    def all_held(self) -> bool:
        return all(c.held for c in self.claims)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "setup": self.setup,
            "columns": self.columns,
            "rows": [
                {"variant": r.variant, "broken": r.broken, "ours": r.ours, "article": r.article}
                for r in self.rows
            ],
            "claims": [{"text": c.text, "held": c.held} for c in self.claims],
            "notes": self.notes,
            "seconds": round(self.seconds, 3),
        }


def fmt(value: Any) -> str:
    """Numbers the way a reader scans them: integers plain, floats to 3 significant digits."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != 0 and abs(value) < 0.01:
            return f"{value:.2g}"
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    if isinstance(value, list):
        return "[" + " ".join(fmt(v) for v in value) + "]"
    return str(value)


def render(result: Result) -> Group:
    """The table (ours, then the article's figure dimmed in brackets) and the claims."""
    table = Table(
        title=f"{result.id} {result.title}",
        caption=result.setup,
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("variant")
    for col in result.columns:
        table.add_column(col, justify="right")
    for r in result.rows:
        label = Text(r.variant, style="red" if r.broken else "green")
        if r.broken:
            label.append(" (don't)", style="dim red")
        cells: list[Text | str] = [label]
        for col in result.columns:
            cell = Text(fmt(r.ours.get(col)))
            if col in r.article:
                cell.append(f" ({fmt(r.article[col])})", style="dim")
            cells.append(cell)
        table.add_row(*cells)
    lines: list[Any] = [table]
    for c in result.claims:
        mark = (
            Text("  held  ", style="bold green") if c.held else Text("  FAILED ", style="bold red")
        )
        lines.append(Text.assemble(mark, c.text))
    for note in result.notes:
        lines.append(Text(f"  note: {note}", style="dim"))
    lines.append(Text(f"  ({result.seconds:.1f} s; article's figures in brackets)", style="dim"))
    return Group(*lines)


def print_result(console: Console, result: Result) -> None:
    console.print(render(result))
    console.print()


def write_chart(result: Result, folder: Path) -> Path | None:
    """One PNG: the chart column per variant, ours beside the article's (needs matplotlib)."""
    column = result.chart
    if column is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r.variant.split(" ")[0] for r in result.rows]
    if len(set(labels)) < len(labels):  # e.g. "plain polling every ...": wrap the full names
        labels = [textwrap.fill(r.variant, 16) for r in result.rows]
    ours = [_number(r.ours.get(column)) for r in result.rows]
    theirs = [_number(r.article.get(column)) for r in result.rows]
    xs = range(len(labels))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(labels)), 3.6))
    width = 0.4
    ax.bar([x - width / 2 for x in xs], ours, width, label="sqljobs lab", color="#3a7")
    ax.bar([x + width / 2 for x in xs], theirs, width, label="article", color="#bbb")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel(column)
    ax.set_title(f"{result.id} {result.title}")
    ax.legend()
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result.id.lower()}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _number(value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return 0.0


def summary(results: Sequence[Result]) -> Text:
    held = sum(1 for r in results for c in r.claims if c.held)
    total = sum(len(r.claims) for r in results)
    style = "bold green" if held == total else "bold red"
    seconds = sum(r.seconds for r in results)
    return Text(f"{held}/{total} structural claims held in {seconds:.1f} s", style=style)
