"""The billing period of a price and what it is counted per, read from the words around it
and from schema.org (pure, no I/O; `tests/test_periods.py` covers it).

Pricing pages write `€4.49/mo`, `$99 per user per year`, `billed annually`, `pro Monat`,
`one-time`; schema.org writes `unitCode: MON` or `billingDuration: P1Y`. Without the period a
switch from monthly to yearly billing would read as a 12x rise, so each price carries
`period` (`month`, `year`, `week`, `day`, `hour`, `one-time` or None) and `per` (`user`, `GB`,
... or None). Only words that say a period next to a price count: a bare "month" in a sentence does
not; "/mo", "per month", "pro Monat", "monthly" or "billed annually" does. A unit written on
the amount ("/mo", "per month") wins over a billing word ("billed annually") wherever the
two are: `$10/mo, billed annually` is ten a month.
"""

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal

PERIODS = ("hour", "day", "week", "month", "year", "one-time")

# A unit on the amount: what comes before it ("/", "per", "a", "pro", "par", "al" ...) and
# the spellings of each period after it (English, German, French, Spanish, Italian, Dutch).
# Short ones (`/d`, `/y`, `/mo`, `par an`) count only after a slash or "per"/"par" ("a y" is
# Spanish for "and", "per an hour" is no year).
_ON = r"(?:/|\b(?:per|a|each|every|pro|im|je|par|al|por)\b)"
_UNITS = {
    # `/h` and `/hr` only after a slash: "10 h" is a duration, "per an hour" says none.
    "hour": (r"hr|hrs|hour|hours|stunde|heure|hora|uur", r"/\s*h"),
    "day": (r"day|days|tag|jour|d[ií]a|giorno|dag", r"/\s*d"),
    "week": (r"wk|wks|week|weeks|woche|semaine|semana|settimana", r"/\s*w"),
    "month": (r"mth|mnth|month|months|monat|mois|mes|mese|maand", r"(?:/|\bper\b)\s*mos?"),
    "year": (
        r"yr|yrs|year|years|jahr|ann[ée]e|annum|a[ñn]o|anno|jaar",
        r"/\s*y|(?:/|\bpar\b)\s*an",
    ),
}
# `_ON` once before every period's words, then the short forms: a search tries `_ON` once at
# each place, not once per period (five times faster on a plan card's text).
_UNIT_PATTERN = re.compile(
    rf"{_ON}\s*(?:"
    + "|".join(rf"(?P<{period}>{words})" for period, (words, _) in _UNITS.items())
    + r")(?![\w-])|"
    + "|".join(rf"(?P<{period}_short>{short})(?![\w-])" for period, (_, short) in _UNITS.items()),
    re.IGNORECASE,
)
# Words that say a period alone: billing words ("monthly", "billed annually", "jährlich").
_ALONE = {
    "hour": r"hourly|st[üu]ndlich|stuendlich|horaire|por hora|all'ora|per uur",
    "day": r"daily|t[äa]glich|taeglich|quotidien(?:ne)?|diario|giornaliero",
    "week": r"weekly|w[öo]chentlich|woechentlich|hebdomadaire|semanal|settimanale|wekelijks",
    "month": r"monthly|monatlich|mensuel(?:le)?|mensual|mensile|maandelijks",
    "year": r"yearly|annually|annual|j[äa]hrlich|jaehrlich|annuel(?:le)?|anual|annuale"
    r"|jaarlijks",
    "one-time": r"one[- ]?time|one[- ]off|pay once|paid once|once only|lifetime|einmalig"
    r"|paiement unique|pago [úu]nico|una tantum|eenmalig",
}
_ALONE_PATTERN = re.compile(
    r"(?<![\w-])(?:"
    + "|".join(f"(?P<{period.replace('-', '_')}>{words})" for period, words in _ALONE.items())
    + r")(?![\w-])",
    re.IGNORECASE,
)
# What a plan is counted per: a user, a seat, a gigabyte ...
_PER = {
    "user": r"users?|nutzer(?:in)?|benutzer(?:in)?|utilisateur|usuario|utente|gebruiker"
    r"|person|people|persons",
    "seat": r"seats?|platz|si[èe]ge",
    "member": r"members?|mitglied",
    "agent": r"agents?",
    "editor": r"editors?",
    "device": r"devices?|ger[äa]t",
    "host": r"hosts?",
    "server": r"servers?",
    "site": r"sites?|websites?",
    "license": r"licen[sc]es?|lizenz",
    "GB": r"gb|gigabytes?",
    "TB": r"tb|terabytes?",
    "MB": r"mb|megabytes?",
    "contact": r"contacts?|kontakt",
    "employee": r"employees?|mitarbeiter(?:in)?",
    "node": r"nodes?",
    "core": r"v?cores?|vcpus?|cpus?",
}
_PER_PATTERN = re.compile(
    r"(?:/|\b(?:per|each|pro|je|par|por)\b)\s*(?:"
    + "|".join(f"(?P<{unit}>{words})" for unit, words in _PER.items())
    + r")(?![\w-])",
    re.IGNORECASE,
)
# Whether a text may say any of them, cheaply: every unit and every per follows a slash or one
# of `_ON`'s words, and each billing word starts with one of these words, so a text with
# neither cannot say a period. Most prices say none, and a listing's hundreds of cards each
# had a case-insensitive search of all of them (about 38 us for a card: 30 ms a page of 800).
_FIRST_WORDS = frozenset({
    "per", "a", "each", "every", "pro", "im", "je", "par", "al", "por", "hourly", "stündlich",
    "stundlich", "stuendlich", "horaire", "all", "daily", "täglich", "taglich", "taeglich",
    "quotidien", "quotidienne", "diario", "giornaliero", "weekly", "wöchentlich", "wochentlich",
    "woechentlich", "hebdomadaire", "semanal", "settimanale", "wekelijks", "monthly", "monatlich",
    "mensuel", "mensuelle", "mensual", "mensile", "maandelijks", "yearly", "annually", "annual",
    "jährlich", "jahrlich", "jaehrlich", "annuel", "annuelle", "anual", "annuale", "jaarlijks",
    "one", "onetime", "oneoff", "pay", "paid", "once", "lifetime", "einmalig", "paiement", "pago",
    "una", "eenmalig",
})  # fmt: skip
_WORD = re.compile(r"[^\W\d_]+")
# An ASCII text's words, three to seven times faster than `_WORD`: every byte that is no
# letter becomes a space, and every letter lower case.
_ASCII_WORDS = bytes(c | 0x20 if chr(c).isalpha() else 32 for c in range(128)) + b" " * 128
_FIRST_ASCII = frozenset(word.encode() for word in _FIRST_WORDS if word.isascii())


def may_say(text: str) -> bool:
    """Whether the text may say a period or a per: a slash, or a word one starts with."""
    if "/" in text:
        return True
    if text.isascii():
        return not _FIRST_ASCII.isdisjoint(text.encode().translate(_ASCII_WORDS).split())
    return not _FIRST_WORDS.isdisjoint(_WORD.findall(text.lower()))


# UN/CEFACT common codes schema.org uses in unitCode, and ISO 8601 durations (billingDuration).
_CODES = {"HUR": "hour", "DAY": "day", "WEE": "week", "MON": "month", "ANN": "year"}
_CODE_PER = {"E34": "GB", "E35": "TB", "4L": "MB", "IE": "user"}
_DURATION = re.compile(r"P(?:1|0*1)([DWMY])|PT0*1(H)", re.IGNORECASE)
_DURATION_UNITS = {"H": "hour", "D": "day", "W": "week", "M": "month", "Y": "year"}
# How many of each period a month holds: `per_month`.
_PER_MONTH: dict[str, Decimal] = {
    "hour": Decimal(730),  # a cloud bill's month: 8,760 hours a year over 12
    "day": Decimal(365) / 12,
    "week": Decimal(52) / 12,
    "month": Decimal(1),
    "year": 1 / Decimal(12),
}


def period_in(text: str) -> str | None:
    """The period the text says a price is for: a unit on the amount (the first one), else a
    billing word (the first one); None if it says none."""
    if unit := _UNIT_PATTERN.search(text):
        return str(unit.lastgroup).removesuffix("_short")
    if alone := _ALONE_PATTERN.search(text):
        return str(alone.lastgroup).replace("_", "-")
    return None


def per_in(text: str) -> str | None:
    """What the text says the price is counted per (`user`, `GB`, ...); None if nothing."""
    match = _PER_PATTERN.search(text)
    return match.lastgroup if match else None


def from_structured(spec: Mapping[str, object]) -> tuple[str | None, str | None]:
    """`(period, per)` of a schema.org price specification: `billingDuration` (an ISO 8601
    duration of one period, a QuantitativeValue, or a number of `unitCode`s), `unitCode`
    (`MON`, `ANN`, `DAY`, `WEE`; `E34` a GB), `unitText`, or `referenceQuantity`'s unit."""
    period = per = None
    duration = spec.get("billingDuration")
    if isinstance(duration, Mapping):
        period = _code(duration.get("unitCode")) or _worded(duration.get("unitText"))[0]
    elif isinstance(duration, str) and (match := _DURATION.fullmatch(duration.strip())):
        period = _DURATION_UNITS[(match.group(1) or match.group(2)).upper()]
    code = str(spec.get("unitCode") or "").strip().upper()
    period = period or _CODES.get(code)
    per = _CODE_PER.get(code)
    text_period, text_per = _worded(spec.get("unitText"))
    period, per = period or text_period, per or text_per
    quantity = spec.get("referenceQuantity")
    if isinstance(quantity, Mapping):
        code = str(quantity.get("unitCode") or "").strip().upper()
        text_period, text_per = _worded(quantity.get("unitText"))
        period = period or _CODES.get(code) or text_period
        per = per or _CODE_PER.get(code) or text_per
    return period, per


def read(
    text: str, around: Iterable[str] = (), spec: Mapping[str, object] | None = None
) -> tuple[str | None, str | None]:
    """`(period, per)` of a price: what its structured data says, else its own text, else the
    nearest neighbour's text that says one (`around`, nearest first)."""
    if not spec and not around:  # a price alone in its element: the common case
        return (period_in(text), per_in(text)) if may_say(text) else (None, None)
    period, per = from_structured(spec) if spec else (None, None)
    texts = [text, *around]
    widest = texts[-1]  # a neighbourhood's: the nearest holds the price's, the next the nearest
    if all(words in widest for words in texts) and not may_say(widest):
        return period, per
    for words in texts:
        if period is not None and per is not None:
            break
        period = period or period_in(words)
        per = per or per_in(words)
    return period, per


def per_month(amount: Decimal, period: str | None) -> Decimal | None:
    """The amount as a monthly one (`prices --per month`), to the cent or to the amount's own
    places if finer; None where the period does not convert (unknown, or one-time)."""
    if period is None or period not in _PER_MONTH:
        return None
    if period == "month":
        return amount  # as the page wrote it: `4.5` stays `4.5`
    exponent = amount.normalize().as_tuple().exponent
    places = max(2, -exponent if isinstance(exponent, int) else 2)
    return (amount * _PER_MONTH[period]).quantize(Decimal(1).scaleb(-places))


def unit(period: str | None, per: str | None) -> str:
    """How a price's period and per are written after its amount: `/user/month`, `/GB`,
    ` one-time`, or nothing."""
    parts = [word for word in (per, period) if word is not None and word != "one-time"]
    return ("/" + "/".join(parts) if parts else "") + (" one-time" if period == "one-time" else "")


def _code(code: object) -> str | None:
    return _CODES.get(str(code).strip().upper()) if code else None


def _worded(text: object) -> tuple[str | None, str | None]:
    """A schema.org `unitText` (`month`, `per user`, `GB`): the period or per it names."""
    if not isinstance(text, str) or not text.strip():
        return None, None
    said = f"per {text.strip()}"
    return period_in(said) or period_in(text), per_in(said)
