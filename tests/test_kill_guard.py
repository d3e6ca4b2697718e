"""Tests that kill the mutants `make mutants` found surviving in guard (docs/testing.md#mutation-testing)."""
