"""Tests that kill the mutants `make mutants` found surviving in prices (docs/testing.md#mutation-testing)."""
