"""Precise tests for deliveries (activities/notify.py) that `make mutants` showed missing:
each kills mutants no other test noticed."""
