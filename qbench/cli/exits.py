"""The exit codes of every ``qbench`` command (``main.EPILOG`` says what each means)."""

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_NO_BASELINE = 4  # compare: no comparable baseline
