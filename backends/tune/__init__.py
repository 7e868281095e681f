"""`ltx-tui --tune`: time the runnable values of the speed options at an LTX-2 run's shapes (an
option with one, none), each in its own worker process, and cache the results for `auto`
(`backends.machine.tuned`)."""
