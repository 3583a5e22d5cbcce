"""The root group's class: commands imported only when they run, and a global option given
after its command refused with where it belongs."""

from __future__ import annotations

import importlib
from typing import Any

import click


class Deferred(click.Command):
    """Stands in a group's command list for a command that is imported only when it runs,
    so ``sqljobs --help`` and every other command do not load it. ``target`` is
    ``module:attr``; ``short_help`` is what the list shows (a test keeps it equal to the
    real command's)."""

    def __init__(self, name: str, target: str, short_help: str) -> None:
        super().__init__(name, short_help=short_help, add_help_option=False)
        self.target = target

    def load(self) -> click.Command:
        module, _, attr = self.target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command), f"{self.target} is not a click command"
        return command


class DeferringGroup(click.Group):
    """A click group that swaps a :class:`Deferred` command for the real one when it is
    resolved to run (or to complete or show its own help)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, Deferred):
            command = command.load()
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; one of this group's own options given after the command
        (``sqljobs worker --app x``) is refused with where it belongs, not click's bare
        "No such option"."""
        try:
            return super().invoke(ctx)
        except click.NoSuchOption as exc:
            mine = {opt for param in self.params if not param.is_eager for opt in param.opts}
            if exc.option_name not in mine or exc.ctx is None:
                raise
            command = exc.ctx.command_path[len(ctx.command_path) :].strip()  # "jobs list"
            raise click.UsageError(
                f"{exc.option_name} is an option of sqljobs itself, not of {command!r}: "
                f"give it before the command ({ctx.command_path} {exc.option_name} ... "
                f"{command} ...)",
                ctx=exc.ctx,
            ) from None
