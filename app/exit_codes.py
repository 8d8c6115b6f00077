"""Process exit codes of the `app` command, in one place.

Lives here: `EXIT_OK`, `EXIT_FAILED`, `EXIT_INVALID`, `EXIT_INTERRUPTED`. Imports nothing, so `app nodes` and
argument errors don't pay for importing the headless runner.
"""

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 130
