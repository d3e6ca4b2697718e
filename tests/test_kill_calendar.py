"""Tests that kill the mutants `make mutants` found surviving in calendar (docs/testing.md#mutation-testing)."""
