"""An Input that applies every key in the order it arrives."""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class OrderedInput(Input):
    """Textual's Input inserts a typed character as its key arrives, but runs a bound key
    (backspace, delete, the cursor keys, enter) only once that key has bubbled up to the app:
    keys that arrive together (fast typing, a terminal or an SSH link that batches them) were
    applied out of order, and edits were lost ("224x22" + backspace + "9" stayed "224x22";
    Textualize/textual#6605). This one runs its own bindings as each key arrives, and tab /
    shift+tab too (moving the focus then), handing the keys that arrived behind them to the field
    they moved to: "224x224", tab, "9" had typed the 9 into the resolution."""

    async def _on_key(self, event: events.Key) -> None:
        focused = self.screen.focused
        if focused is not self and focused is not None:  # came after a tab that took the focus away
            event.stop()
            event.prevent_default()
            focused.post_message(events.Key(event.key, event.character))
            return
        if event.key in ("tab", "shift+tab"):  # moved now: the keys behind it are the next field's
            event.stop()
            event.prevent_default()
            self.screen.focus_next() if event.key == "tab" else self.screen.focus_previous()
            return
        await super()._on_key(event)
        if event.is_printable:
            return
        bindings = self._bindings.key_to_bindings.get(event.key, [])
        if bindings and not bindings[0].priority:
            event.stop()
            event.prevent_default()
            await self.run_action(bindings[0].action)
