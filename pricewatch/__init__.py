"""pricewatch: a durable page-change monitor on Temporal and Postgres."""
