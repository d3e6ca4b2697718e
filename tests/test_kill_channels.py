"""Tests that kill the mutants `make mutants` found surviving in channels (docs/testing.md#mutation-testing)."""
