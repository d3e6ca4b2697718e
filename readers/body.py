"""What a check records of a body, fetched or rendered: its prices (price mode) or its
normalised text, and their hash. One reader per mode, in READERS; the fetchers call `read`
(on the event loop or in a thread, as the body's size says: `fetchers.http.read_body`)."""

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from pricewatch.models import Extraction
from pricewatch.prices import Price, Reading, listing
from readers.normalise import normalise
from readers.price_reader import observe

Mode = Literal["prices", "text"]


@dataclass(frozen=True)
class Record:
    """`text` is what is hashed (`sha256`): the normalised text, or in price mode the listing
    of `prices`, with each value that could not be read named in `skipped`."""

    text: str
    sha256: str
    prices: list[Price] | None = None
    skipped: list[str] = field(default_factory=list)


def _prices(body: bytes, content_type: str, extraction: Extraction) -> Record:
    assert extraction.price_mode is not None  # mode_of
    reading = observe(body, content_type, extraction.price_mode)
    return _recorded(listing(reading.prices), reading)


def _text(body: bytes, content_type: str, extraction: Extraction) -> Record:
    return _recorded(normalise(body, content_type, extraction))


def _recorded(text: str, reading: Reading | None = None) -> Record:
    digest = hashlib.sha256(text.encode()).hexdigest()
    if reading is None:
        return Record(text, digest)
    return Record(text, digest, reading.prices, reading.skipped)


READERS: dict[Mode, Callable[[bytes, str, Extraction], Record]] = {
    "prices": _prices,
    "text": _text,
}


def mode_of(extraction: Extraction) -> Mode:
    return "text" if extraction.price_mode is None else "prices"


def read(body: bytes, content_type: str, extraction: Extraction) -> Record:
    """The body read by its target's mode; raises ExtractionError when a rule cannot apply."""
    return READERS[mode_of(extraction)](body, content_type, extraction)
