"""`ltx-tui --tune`: time every runnable value of the speed options at an LTX-2 run's shapes,
each in its own worker process, and cache the results for `auto` (`backends.machine.tuned`)."""
