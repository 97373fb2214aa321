"""The composition root: builds the processes from settings; it may import every package, none imports it."""
