"""ltx-tui's version: written into profiles and JSON output, and part of the tune cache's key."""

TOOL_VERSION = "0.1.0"
