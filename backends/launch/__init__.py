"""`ltx-tui run`: LTX-2 v1.2.0's own pipeline modules run with a profile applied to every model
they build, each run recorded per stage in the ledger (`backends.machine.runs`).

flags (the profile is authoritative over LTX-2's speed flags) <- gate (LTX-2's version and the
signatures it wraps) <- meter (seconds and peak memory per stage and step) <- hooks (wrappers on
LTX-2's builders and pipeline blocks) <- run (prepare, dry run, launch, the record).
"""
