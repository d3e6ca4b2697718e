"""The readers: what a check makes of a body, with no I/O (tests/test_layers.py holds them to
it). `body` picks the reader by the target's mode: its prices (`price_reader`, with
`price_structured` and `price_words`) or its normalised text (`normalise`); `price_suggest`
is `try`'s suggestions, `snapshots` the stored text's compression and diff."""
