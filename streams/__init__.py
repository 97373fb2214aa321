"""The Faust app and its agents (SPEC §5): the gate today; nudge, linker, importance and health later."""
