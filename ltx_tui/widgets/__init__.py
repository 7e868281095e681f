"""Widgets of the ltx-tui app; each renders data handed to it and does no I/O."""
