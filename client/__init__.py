"""The typed client any program uses to steer and read pricewatch (`client.pricewatch`), its
Temporal connection (`client.temporal`) and targets files (`client.manifest`): above the
activities and workflows it calls, below the surfaces (`surfaces/`) built on it."""
