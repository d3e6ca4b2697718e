"""Tests that kill the mutants `make mutants` found surviving in browser_proxy (docs/testing.md#mutation-testing)."""
