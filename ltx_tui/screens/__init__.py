"""Modal screens of the ltx-tui app."""
