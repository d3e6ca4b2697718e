"""Precise tests for the store's claim and commit (activities/store.py, sql/queries.sql) that
`make mutants` showed missing: each kills mutants no other test noticed."""
