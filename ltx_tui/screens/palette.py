"""ltx-tui's commands in the command palette (ctrl+p), generated from the option specs: set an option
to each of its values (or open the editor of a number), explain an option, smoke, tune, export and
the tabs. The app provides what they run: set_option, edit_option, explain_option, value_marks and
its actions."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Iterator

from textual.command import DiscoveryHit, Hit, Hits, Provider

from backends.config.options import OPTIONS, Kind
from backends.config.options import show_value
from ltx_tui.widgets.options_list import MARK, choice_values, typed_choice

Command = tuple[str, Callable[[], Any], str]  # what the palette lists, what it runs, its help line


def literal(text: str) -> str:
    """`text` as the palette's help markup shows it literally: every `[` escaped (Textual's own
    `escape` leaves `[/opt/x` and `[B]` to its markup parser, which raises or drops them)."""
    return text.replace("[", "\\[")


class LtxCommands(Provider):
    """The commands of the app's current profile, gathered when the palette opens."""

    async def startup(self) -> None:
        self.commands = list(self._commands())

    def _commands(self) -> Iterator[Command]:
        app: Any = self.app
        yield ("smoke", app.action_smoke, "run the smoke checks for the current selection (s)")
        yield ("tune", app.action_tune, "time every value of the speed options here, at the run's shape (u)")
        yield ("export", app.action_export, "write the profile and show the ltx-tui run and LTX-2 command lines (e)")
        for tab, label in app.TABS.items():
            key = next(b.key for b in app.BINDINGS if b.action == f"tab({tab!r})")
            yield (f"switch tab: {label}", partial(app.action_tab, tab), f"open the {label} tab ({key})")
        for spec in OPTIONS:
            now = show_value(app.profile.get(spec.key))
            if spec.kind in (Kind.CHOICE, Kind.BOOL):
                marks = app.value_marks(spec.key)
                for value in choice_values(spec):
                    status, why = marks.get(value, (None, ""))
                    here = f"{MARK[status] or '✓'} {status.value}: {why}" if status else spec.help
                    yield (f"set {spec.key} = {value}", partial(app.set_option_said, spec.key, typed_choice(spec, value)),
                           f"{'(current) ' if value == now else ''}{here}")
            else:
                yield (f"set {spec.key} = …", partial(app.edit_option, spec.key),
                       f"open the editor (now {now}; {spec.allowed()})")
            yield (f"explain {spec.key}", partial(app.explain_option, spec.key), spec.help)

    async def discover(self) -> Hits:
        """With nothing typed: the actions and the tabs (type 'set' or 'explain' for the options)."""
        for name, run, help in self.commands:
            if not name.startswith(("set ", "explain ")):
                yield DiscoveryHit(name, run, help=literal(help))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, run, help in self.commands:  # names are keys and values of the vocabulary: no markup in them
            if (score := matcher.match(name)) > 0:
                yield Hit(score, matcher.highlight(name), run, text=name, help=literal(help))
