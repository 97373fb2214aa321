"""The recall HTTP service (SPEC §7): `create_app` in recall.app, `episodic serve` in recall.server."""
