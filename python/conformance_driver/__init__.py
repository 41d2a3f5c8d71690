"""Conformance driver: the Python clients behind the runner's JSON-lines
pipe protocol (docs/writing-a-client.md). Not part of the package."""
