"""Price mode's decisions, as pure functions: what an observation is, how two compare, and
which moves the target's rules tell (no I/O; `tests/test_prices.py` covers them).

An observation is the page's prices in page order, each named: `[Price(name, amount,
currency), ...]`. It is stored with its slot's row, and its text (`listing`) is what is hashed,
so a page whose prices did not move is `unchanged` whatever else changed on it. Rules are
evaluated against the previous observation, the same one the hash compares with: a price that
crosses a threshold is told once, at the check that sees it cross, and not again while it stays.
"""

import re
from dataclasses import dataclass, field, replace
from decimal import Decimal

from pricewatch.models import NotifyOn, PriceSettings
from pricewatch.periods import unit


@dataclass(frozen=True)
class Price:
    """One price the page shows now. `regular` is the struck-out price beside it (a sale's
    "was"), never recorded as the price; `availability` is schema.org's word for its stock
    (`InStock`, `OutOfStock`, ...), where the page says."""

    name: str
    amount: Decimal
    currency: str | None = None
    regular: Decimal | None = None
    availability: str | None = None
    source: str | None = field(default=None, compare=False)
    """Where on the page it was read (`JSON-LD offer 'Pro'`, `match 2`): for `try`, not kept."""
    period: str | None = None
    """What the amount pays for (`month`, `year`, `week`, `day`, `one-time`; pricewatch.periods),
    where the page says."""
    per: str | None = None
    """What it is counted per (`user`, `seat`, `GB`), where the page says."""

    def as_json(self) -> dict[str, str | None]:
        """Kept with the slot's row. Fields the page did not say are left out: a row of 1.11
        (no period) and a price without one read the same."""
        value = {"name": self.name, "amount": str(self.amount), "currency": self.currency}
        if self.regular is not None:
            value["regular"] = str(self.regular)
        if self.availability is not None:
            value["availability"] = self.availability
        if self.period is not None:
            value["period"] = self.period
        if self.per is not None:
            value["per"] = self.per
        return value

    @classmethod
    def from_json(cls, value: dict[str, str | None]) -> "Price":
        regular = value.get("regular")
        return cls(
            str(value["name"]),
            Decimal(str(value["amount"])),
            value.get("currency"),
            Decimal(regular) if regular is not None else None,
            value.get("availability"),
            period=value.get("period"),
            per=value.get("per"),
        )


@dataclass(frozen=True)
class Reading:
    """What price mode read on a page: the prices, and each value it could not read (named,
    with why), which is skipped instead of failing the page."""

    prices: list[Price]
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Move:
    """One named price that differs from the previous observation (None: it was not there, or
    is not any more), and the rules that fired for it."""

    name: str
    old: Decimal | None
    new: Decimal | None
    currency: str | None
    old_currency: str | None
    rules: tuple[str, ...] = ()
    availability: str | None = None
    old_availability: str | None = None
    period: str | None = None
    old_period: str | None = None
    per: str | None = None
    old_per: str | None = None

    @property
    def period_changed(self) -> bool:
        """A price seen both times whose period or per is another (`10 EUR/month` then `100
        EUR/year`): its own kind of move, whose amounts are not compared (no 10x rise)."""
        return (
            self.old is not None
            and self.new is not None
            and (self.period, self.per) != (self.old_period, self.old_per)
        )

    @property
    def change(self) -> Decimal | None:
        if self.old is None or self.new is None or self.currency != self.old_currency:
            return None
        if self.period_changed:
            return None
        return self.new - self.old

    @property
    def change_percent(self) -> Decimal | None:
        change = self.change
        if change is None or self.old is None or self.old == 0:
            return None
        return round(change * 100 / self.old, 2)

    def as_json(self) -> dict[str, object]:
        def text(value: Decimal | None) -> str | None:
            return None if value is None else str(value)

        return {
            "name": self.name,
            "old": text(self.old),
            "new": text(self.new),
            "currency": self.currency if self.new is not None else self.old_currency,
            "previous_currency": self.old_currency,
            "change": text(self.change),
            "change_percent": text(self.change_percent),
            "rules": list(self.rules),
            **(
                {"availability": self.availability, "previous_availability": self.old_availability}
                if self.availability != self.old_availability
                else {}
            ),
            **(
                {
                    "period": self.period,
                    "previous_period": self.old_period,
                    "per": self.per,
                    "previous_per": self.old_per,
                }
                if (self.period, self.old_period, self.per, self.old_per) != (None,) * 4
                else {}
            ),
        }

    @property
    def stock(self) -> "NotifyOn | None":
        """The stock transition of a price seen both times: back in stock, out of stock, or
        none (the same state, or one the page did not say)."""
        if self.old is None or self.new is None:
            return None
        before, after = in_stock(self.old_availability), in_stock(self.availability)
        if before is False and after is True:
            return NotifyOn.BACK_IN_STOCK
        if before is True and after is False:
            return NotifyOn.OUT_OF_STOCK
        return None


IN_STOCK = {"InStock", "LimitedAvailability", "OnlineOnly", "InStoreOnly"}
NOT_IN_STOCK = {
    "OutOfStock", "SoldOut", "Discontinued", "BackOrder", "PreOrder", "PreSale", "MadeToOrder",
    "Reserved",
}  # fmt: skip
STOCK_RULES = {NotifyOn.BACK_IN_STOCK, NotifyOn.OUT_OF_STOCK}


def in_stock(availability: str | None) -> bool | None:
    """Whether a shopper can buy it now; None where the page does not say."""
    if availability in IN_STOCK:
        return True
    return False if availability in NOT_IN_STOCK else None


def move_line(move: dict[str, object]) -> str:
    """A move in its JSON form (as notices carry it and the database keeps it), for people:
    `Pro: 12.00 -> 13.00 EUR/month (+1.00, +8.33%) [rise]`; a price whose period changed
    says each side's and that it is not a rise or drop: `Pro: 10 EUR/month -> 100 EUR/year
    (billing period changed)`."""

    def signed(value: object) -> str:
        return str(value) if str(value).startswith("-") else f"+{value}"

    def said(key: str) -> str | None:
        value = move.get(key)
        return value if isinstance(value, str) else None

    old_unit = unit(said("previous_period"), said("previous_per"))
    new_unit = unit(said("period"), said("per"))
    if move["old"] is not None and move["new"] is not None and old_unit != new_unit:
        before = f"{move['old']} {move.get('previous_currency') or ''}".rstrip() + old_unit
        after = f"{move['new']} {move['currency'] or ''}".rstrip() + new_unit
        what = "period" if said("period") != said("previous_period") else "unit"
        line = f"{move['name']}: {before} -> {after} (billing {what} changed)"
    else:
        amounts = f"{move['old'] or '-'} -> {move['new'] or '-'} {move['currency'] or ''}"
        line = f"{move['name']}: {amounts.rstrip()}"
        line += new_unit if move["new"] is not None else old_unit
    if move["change"] is not None and Decimal(str(move["change"])) != 0:
        line += f" ({signed(move['change'])}"
        line += f", {signed(move['change_percent'])}%)" if move["change_percent"] else ")"
    if move.get("availability") != move.get("previous_availability"):
        words = [stock_words(str(w)) if w else "-" for w in (move.get("previous_availability"),
                 move.get("availability"))]  # fmt: skip
        line += f", {words[0]} -> {words[1]}"
    if isinstance(rules := move["rules"], list) and rules:
        line += f" [{', '.join(map(str, rules))}]"
    return line.rstrip()


def listing(prices: list[Price]) -> str:
    """The observation as text, one price per line: hashed, kept as the snapshot, diffed.
    Stock and the period are part of it where the page says (a page back in stock, a plan
    billed yearly that was billed monthly, is a change: `Pro: 100 EUR/year`); the struck-out
    price is not (a new "was" beside the same price is not a move)."""
    lines = []
    for price in prices:
        line = f"{price.name}: {price.amount.normalize():f} {price.currency or ''}".rstrip()
        line += unit(price.period, price.per)
        if price.availability is not None:
            line += f", {stock_words(price.availability)}"
        lines.append(line)
    return "\n".join(lines)


def stock_words(availability: str) -> str:
    """schema.org's `OutOfStock` as people write it: `out of stock`."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", availability).lower()


def moves(previous: list[Price], current: list[Price], rules: PriceSettings) -> list[Move]:
    """Every price that moved, appeared or went, in page order, with the rules that fire."""
    before = {p.name: p for p in previous}
    now = {p.name: p for p in current}
    found = []
    for name in [*now, *(n for n in before if n not in now)]:
        old, new = before.get(name), now.get(name)
        if (
            old is not None
            and new is not None
            and (old.amount, old.currency, old.availability, old.period, old.per)
            == (new.amount, new.currency, new.availability, new.period, new.per)
        ):
            continue
        move = Move(
            name,
            old.amount if old else None,
            new.amount if new else None,
            new.currency if new else None,
            old.currency if old else None,
            availability=new.availability if new else None,
            old_availability=old.availability if old else None,
            period=new.period if new else None,
            old_period=old.period if old else None,
            per=new.per if new else None,
            old_per=old.per if old else None,
        )
        found.append(replace(move, rules=fired(move, rules)))
    return found


def fired(move: Move, rules: PriceSettings) -> tuple[str, ...]:
    """The rules this move satisfies; empty if it is not told. A stock rule holds on its
    transition. For the price, every rule given must hold: a direction (any of the
    `notify_on` given), a crossing of `below` or `above` if either is set, and a move of at
    least `min_change_percent` if set. A change of period is a change of the price, neither
    a drop nor a rise, and crosses no threshold: `10 EUR/month` then `100 EUR/year` is told
    by `price-change` and `any-change` alone, when no threshold is set."""
    stock = [rule.value for rule in rules.notify_on if rule is move.stock]
    directions = [rule for rule in rules.notify_on if rule not in STOCK_RULES]
    return (*_price_rules(move, rules, directions), *stock)


def _price_rules(move: Move, rules: PriceSettings, directions: list[NotifyOn]) -> list[str]:
    if move.period_changed:
        thresholds = (rules.below, rules.above, rules.min_change_percent)
        if thresholds != (None, None, None):
            return []
        changes = (NotifyOn.ANY_CHANGE, NotifyOn.PRICE_CHANGE)
        return [rule.value for rule in directions if rule in changes]
    change = move.change
    if change is None or change == 0:  # appeared, went, changed currency or stock only
        return ["any-change"] if NotifyOn.ANY_CHANGE in directions else []
    assert move.old is not None and move.new is not None
    holds = {
        NotifyOn.ANY_CHANGE: True,
        NotifyOn.PRICE_CHANGE: True,
        NotifyOn.DROP: change < 0,
        NotifyOn.RISE: change > 0,
    }
    told = [rule.value for rule in directions if holds[rule]]
    if not told:
        return []
    if rules.below is not None or rules.above is not None:
        crossings = []
        if rules.below is not None and move.old >= rules.below > move.new:
            crossings.append(f"below {rules.below}")
        if rules.above is not None and move.old <= rules.above < move.new:
            crossings.append(f"above {rules.above}")
        if not crossings:
            return []
        told += crossings
    if rules.min_change_percent is not None:
        percent = move.change_percent
        if percent is None or abs(percent) < rules.min_change_percent:
            return []
        told.append(f"change >= {rules.min_change_percent}%")
    return told


def tells(found: list[Move]) -> bool:
    """Whether the channels hear of this change: some move fired a rule."""
    return any(move.rules for move in found)
