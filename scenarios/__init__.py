"""Experiments: scenario files, building and running them, run outputs, the CLI."""
