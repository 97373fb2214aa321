"""`python -m stack ...`: the `episodic` command."""

from stack.cli import main

raise SystemExit(main())
