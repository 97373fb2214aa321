"""The command-line front-ends, one module per command: argument parsing, exit statuses, output.

Each exposes `main(argv) -> int`; `stack.cli` dispatches to them. The work itself is done by the
library code they call (the Stack, the producer helper and HTTP client of the core, the gate runner).
"""
