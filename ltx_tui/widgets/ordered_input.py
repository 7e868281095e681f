"""An Input that applies every key in the order it arrives."""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class OrderedInput(Input):
    """Textual's Input inserts a typed character as its key arrives, but runs a bound key
    (backspace, delete, the cursor keys, enter) only once that key has bubbled up to the app:
    keys that arrive together (fast typing, a terminal or an SSH link that batches them) were
    applied out of order, and edits were lost ("224x22" + backspace + "9" stayed "224x22";
    Textualize/textual#6605). This one runs a bound key as it arrives, through the same binding
    chain the app would walk (its own bindings, then its containers', the screen's and the app's:
    tab to the next field, the Plan form's escape), and hands the keys that arrived behind one that
    moved the focus to the widget it moved to ("224x224", tab, "9" had typed the 9 into the
    resolution; escape, "o" the o)."""

    async def _on_key(self, event: events.Key) -> None:
        focused = self.screen.focused
        if focused is not self and focused is not None:  # came behind a key that took the focus away
            event.stop()
            event.prevent_default()
            focused.post_message(events.Key(event.key, event.character))
            return
        await super()._on_key(event)
        if event.is_printable:
            return
        if await self.app._check_bindings(event.key):  # Textual's own dispatch, run now instead of later
            event.stop()
            event.prevent_default()
