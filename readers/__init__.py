"""The readers: what a check makes of a body, with no I/O: its prices (`price_reader`, with
`price_structured` and `price_words`) or its normalised text (`normalise`); `price_suggest`
is `try`'s suggestions, `snapshots` the stored text's compression and diff."""
