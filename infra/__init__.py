"""Infrastructure: the embedded broker launcher and the ops configuration files beside it."""
