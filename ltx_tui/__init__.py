"""ltx-tui: terminal configurator for LTX-2 performance backends (CLI and Textual app)."""
