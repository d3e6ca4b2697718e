"""Tests that kill the mutants `make mutants` found surviving in render (docs/testing.md#mutation-testing)."""
