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
_ON_WORDS = ("per", "a", "each", "every", "pro", "im", "je", "par", "al", "por")


def _on(words: tuple[str, ...]) -> str:
    """What comes before a unit or a per: a slash, or one of the words."""
    return rf"(?:/|\b(?:{'|'.join(words)})\b)"


def _starts(words: tuple[str, ...]) -> re.Pattern[str]:
    """Where `_on(words)` may begin, as plain words (`_first`): no boundary test before a word, no
    case-folding, so that re skips ahead to their first letters."""
    return re.compile("/|" + "|".join(rf"{word}\b" for word in words))


_ON = _on(_ON_WORDS)
_UNITS = {
    "hour": ("hr", "hrs", "hour", "hours", "stunde", "heure", "hora", "uur"),
    "day": ("day", "days", "tag", "jour", "dia", "día", "giorno", "dag"),
    "week": ("wk", "wks", "week", "weeks", "woche", "semaine", "semana", "settimana"),
    "month": ("mth", "mnth", "month", "months", "monat", "mois", "mes", "mese", "maand"),
    "year": (
        "yr", "yrs", "year", "years", "jahr", "annee", "année", "annum", "ano", "año", "anno",
        "jaar",
    ),
}  # fmt: skip
# `/h` and `/hr` only after a slash: "10 h" is a duration, "per an hour" says none.
_SHORT = {
    "hour": r"/\s*h", "day": r"/\s*d", "week": r"/\s*w", "month": r"(?:/|\bper\b)\s*mos?",
    "year": r"/\s*y|(?:/|\bpar\b)\s*an",
}  # fmt: skip
# Words that say a period alone: billing words ("monthly", "billed annually", "jährlich").
_ALONE = {
    "hour": (
        "hourly", "stündlich", "stundlich", "stuendlich", "horaire", "por hora", "all'ora",
        "per uur",
    ),
    "day": ("daily", "täglich", "taglich", "taeglich", "quotidien", "quotidienne", "diario",
            "giornaliero"),
    "week": ("weekly", "wöchentlich", "wochentlich", "woechentlich", "hebdomadaire", "semanal",
             "settimanale", "wekelijks"),
    "month": ("monthly", "monatlich", "mensuel", "mensuelle", "mensual", "mensile",
              "maandelijks"),
    "year": ("yearly", "annually", "annual", "jährlich", "jahrlich", "jaehrlich", "annuel",
             "annuelle", "anual", "annuale", "jaarlijks"),
    "one-time": ("one-time", "one time", "onetime", "one-off", "one off", "pay once",
                 "paid once", "once only", "lifetime", "einmalig", "paiement unique",
                 "pago único", "pago unico", "una tantum", "eenmalig"),
}  # fmt: skip
# What a plan is counted per: a user, a seat, a gigabyte ...
_PER_ON_WORDS = ("per", "each", "pro", "je", "par", "por")
_PER = {
    "user": ("user", "users", "nutzer", "nutzerin", "benutzer", "benutzerin", "utilisateur",
             "usuario", "utente", "gebruiker", "person", "people", "persons"),
    "seat": ("seat", "seats", "platz", "siège", "siege"),
    "member": ("member", "members", "mitglied"),
    "agent": ("agent", "agents"),
    "editor": ("editor", "editors"),
    "device": ("device", "devices", "gerät", "gerat"),
    "host": ("host", "hosts"),
    "server": ("server", "servers"),
    "site": ("site", "sites", "website", "websites"),
    "license": ("license", "licenses", "licence", "licences", "lizenz"),
    "GB": ("gb", "gigabyte", "gigabytes"),
    "TB": ("tb", "terabyte", "terabytes"),
    "MB": ("mb", "megabyte", "megabytes"),
    "contact": ("contact", "contacts", "kontakt"),
    "employee": ("employee", "employees", "mitarbeiter", "mitarbeiterin"),
    "node": ("node", "nodes"),
    "core": ("core", "cores", "vcore", "vcores", "vcpu", "vcpus", "cpu", "cpus"),
}  # fmt: skip


def _either(words: tuple[str, ...]) -> str:
    return "|".join(map(re.escape, words))


# Searched in lower-case text (`period_in`, `per_in`). `_ON` once before every period's words,
# then the short forms: a search tries `_ON` once at each place, not once per period.
_UNIT_PATTERN = re.compile(
    rf"{_ON}\s*(?:"
    + "|".join(rf"(?P<{period}>{_either(words)})" for period, words in _UNITS.items())
    + r")(?![\w-])|"
    + "|".join(rf"(?P<{period}_short>{short})(?![\w-])" for period, short in _SHORT.items())
)
_ALONE_PATTERN = re.compile(
    r"(?<![\w-])(?:"
    + "|".join(
        f"(?P<{period.replace('-', '_')}>{_either(words)})" for period, words in _ALONE.items()
    )
    + r")(?![\w-])"
)
_PER_PATTERN = re.compile(
    rf"{_on(_PER_ON_WORDS)}\s*(?:"
    + "|".join(f"(?P<{unit}>{_either(words)})" for unit, words in _PER.items())
    + r")(?![\w-])"
)
_UNIT_STARTS = _starts(_ON_WORDS)
_ALONE_STARTS = re.compile("|".join(_either(words) for words in _ALONE.values()))
_PER_STARTS = _starts(_PER_ON_WORDS)

# Whether a text may say a period, or a per, cheaply (`may_say`): a unit or a per is a word of
# its own, and a billing word starts with one, so a text without such a word says none; the
# short units are letters too common alone ("an", "d"), told by the slash or "per"/"par"
# before them. Most prices say none (`$40.00/each` neither), and a listing's hundreds of
# cards each had a case-insensitive search of all the patterns (30 ms a page of 800).
_WORD = re.compile(r"[^\W\d_]+")
_PERIOD_WORDS = frozenset(
    [word for words in _UNITS.values() for word in words]
    + [_WORD.findall(word)[0] for words in _ALONE.values() for word in words]
)
_PER_WORDS = frozenset(word for words in _PER.values() for word in words)
# `_SHORT`'s forms, written out: built from `_SHORT`, whose `\b` stops re from skipping ahead,
# it searched a 250 KiB page's text in 12 ms, not 1 (`may_say` asks it of a whole page).
_SHORT_SAID = re.compile(r"/\s*(?:h|d|w|mos?|y|an)(?![\w-])|per\s*mos?(?![\w-])|par\s*an(?![\w-])")
# A text's words as bytes, three to seven times faster than `_WORD`: every ASCII byte that is
# no letter becomes a space, every letter lower case, and every other byte a space too, so
# the words written with other letters (`día`, `jährlich`) are searched for on their own.
_ASCII_WORDS = bytes(c | 0x20 if chr(c).isalpha() else 32 for c in range(128)) + b" " * 128
_PERIOD_BYTES = frozenset(word.encode() for word in _PERIOD_WORDS)
_PER_BYTES = frozenset(word.encode() for word in _PER_WORDS)
_ACCENTED = re.compile("|".join(sorted(w for w in _PERIOD_WORDS | _PER_WORDS if not w.isascii())))


def may_say(text: str) -> tuple[bool, bool]:
    """Whether the text may say a period, and whether a per: a word each is written with."""
    text = text.lower() if text.isascii() else text.casefold()
    words = text.encode().translate(_ASCII_WORDS).split()
    if not text.isascii():
        words += [word.encode() for word in _ACCENTED.findall(text)]
    period = not _PERIOD_BYTES.isdisjoint(words) or _SHORT_SAID.search(text) is not None
    return period, not _PER_BYTES.isdisjoint(words)


_SAID_BYTES = _PERIOD_BYTES | _PER_BYTES


def may_say_any(text: str) -> bool:
    """`any(may_say(text))`, for a whole page's text: asked once per read, a fifth cheaper."""
    text = text.lower() if text.isascii() else text.casefold()
    if not text.isascii() and _ACCENTED.search(text) is not None:  # each one is such a word
        return True
    words = text.encode().translate(_ASCII_WORDS).split()
    return not _SAID_BYTES.isdisjoint(words) or _SHORT_SAID.search(text) is not None


# UN/CEFACT common codes schema.org uses in unitCode, and ISO 8601 durations (billingDuration).
_CODES = {"HUR": "hour", "DAY": "day", "WEE": "week", "MON": "month", "ANN": "year"}
_CODE_PER = {"E34": "GB", "E35": "TB", "4L": "MB", "IE": "user"}
_DURATION = re.compile(r"P(?:1|0*1)([DWMY])|PT0*1(H)", re.IGNORECASE)
_DURATION_UNITS = {"H": "hour", "D": "day", "W": "week", "M": "month", "Y": "year"}
_SPEC_KEYS = frozenset({"billingDuration", "unitCode", "unitText", "referenceQuantity"})
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
    text = text.casefold()
    if unit := _first(_UNIT_PATTERN, _UNIT_STARTS, text):
        return str(unit.lastgroup).removesuffix("_short")
    if alone := _first(_ALONE_PATTERN, _ALONE_STARTS, text):
        return str(alone.lastgroup).replace("_", "-")
    return None


def per_in(text: str) -> str | None:
    """What the text says the price is counted per (`user`, `GB`, ...); None if nothing."""
    match = _first(_PER_PATTERN, _PER_STARTS, text.casefold())
    return match.lastgroup if match else None


def _first(pattern: re.Pattern[str], starts: re.Pattern[str], text: str) -> re.Match[str] | None:
    """`pattern.search(text)` of a lower-case text, tried only where `starts` finds one of
    the pattern's first words: re skips ahead to the first letters of such an alternation of
    plain words, where it tries every branch of `pattern` at every place (six times faster on a
    plan card's text)."""
    position = 0
    while (start := starts.search(text, position)) is not None:
        if (found := pattern.match(text, start.start())) is not None:
            return found
        position = start.start() + 1
    return None


def from_structured(spec: Mapping[str, object]) -> tuple[str | None, str | None]:
    """`(period, per)` of a schema.org price specification: `billingDuration` (an ISO 8601
    duration of one period, a QuantitativeValue, or a number of `unitCode`s), `unitCode`
    (`MON`, `ANN`, `DAY`, `WEE`; `E34` a GB), `unitText`, or `referenceQuantity`'s unit."""
    if spec.keys().isdisjoint(_SPEC_KEYS):  # most offers say none: a tenth of the time
        return None, None
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
        period_said, per_said = may_say(text)
        return (period_in(text) if period_said else None, per_in(text) if per_said else None)
    period, per = from_structured(spec) if spec else (None, None)
    texts = [text, *around]
    widest = texts[-1]  # a neighbourhood's: the nearest holds the price's, the next the nearest
    period_said = per_said = True
    if all(words in widest for words in texts):  # one text holds the others: its words tell
        period_said, per_said = may_say(widest)
    for words in texts:
        if (period is not None or not period_said) and (per is not None or not per_said):
            break
        if period is None and period_said:
            period = period_in(words)
        if per is None and per_said:
            per = per_in(words)
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
