"""The product catalogue, generated from a seed.

Products are spread evenly over the product types of :mod:`envs.webshop.vocab` and drawn
independently: each gets an ASIN-like id (``B0`` + 8 upper-case letters or digits), a brand
of its category, 3–5 attributes from its type's pool, a subset of its type's option values
for every option name, a price in its type's range, a title naming the type and one or two
of its attributes, a description, and bullet-point features that list all its attributes in
random order. Attributes are only ever written into the text of products that have them, so
"the product has attribute a" and "a appears in the product's text" agree, as WebShop's
attribute reward assumes. As WebShop indexes only a product's title, description, first
bullet point and options, most attributes can be checked on the features page but not
searched for.
"""

from __future__ import annotations

import dataclasses
import random
import string
from collections.abc import Mapping

from envs.webshop import vocab
from envs.webshop.vocab import PRODUCT_TYPES, ProductType

_ASIN_CHARS = string.ascii_uppercase + string.digits
_BRANDS_PER_CATEGORY = 25


@dataclasses.dataclass(frozen=True)
class Product:
    """One product as the item page shows it (option values are lower case)."""

    index: int
    asin: str
    title: str
    product_type: str
    category: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (option name, offered values)
    price: float
    description: str
    features: tuple[str, ...]

    def option_of(self, value: str) -> str | None:
        """The option name under which this product offers ``value``, or None."""
        for name, values in self.options:
            if value in values:
                return name
        return None

    def offers(self, name: str, value: str) -> bool:
        """True if ``value`` is one of the product's values for option ``name``."""
        return any(n == name and value in values for n, values in self.options)

    def text(self) -> str:
        """What a search can match, as WebShop indexes a product: title, description, the
        first feature and the options ("color: black, white, and size: small, large")."""
        options = ", and ".join(f"{name}: {', '.join(values)}" for name, values in self.options)
        return " ".join((self.title, self.description, self.features[0], options))


@dataclasses.dataclass(frozen=True)
class Catalogue:
    """All products, with lookups by lower-case ASIN, product type and category."""

    products: tuple[Product, ...]
    by_asin: Mapping[str, int]
    by_type: Mapping[str, tuple[int, ...]]
    by_category: Mapping[str, tuple[int, ...]]

    def __len__(self) -> int:
        return len(self.products)

    def __getitem__(self, index: int) -> Product:
        return self.products[index]


def build(seed: int, num_products: int) -> Catalogue:
    """The catalogue of ``num_products`` products generated from ``seed``."""
    rng = random.Random(seed)
    brands = _brands(rng)
    kinds = [PRODUCT_TYPES[i % len(PRODUCT_TYPES)] for i in range(num_products)]
    rng.shuffle(kinds)
    asins: set[str] = set()
    products = []
    for index, kind in enumerate(kinds):
        asin = _new_asin(rng, asins)
        products.append(_product(rng, index, asin, kind, brands[kind.category]))
    by_type: dict[str, list[int]] = {}
    by_category: dict[str, list[int]] = {}
    for p in products:
        by_type.setdefault(p.product_type, []).append(p.index)
        by_category.setdefault(p.category, []).append(p.index)
    return Catalogue(
        products=tuple(products),
        by_asin={p.asin.lower(): p.index for p in products},
        by_type={k: tuple(v) for k, v in by_type.items()},
        by_category={k: tuple(v) for k, v in by_category.items()},
    )


def capitalize(phrase: str) -> str:
    """Upper-cases the first letter of every word: "women's t-shirt" → "Women's T-shirt"."""
    return " ".join(w[:1].upper() + w[1:] for w in phrase.split())


def _brands(rng: random.Random) -> dict[str, tuple[str, ...]]:
    names = [start + end for start in vocab.BRAND_STARTS for end in vocab.BRAND_ENDS]
    names = sorted(set(names))
    rng.shuffle(names)
    k = _BRANDS_PER_CATEGORY
    return {c: tuple(names[i * k:(i + 1) * k]) for i, c in enumerate(vocab.CATEGORIES)}


def _new_asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choices(_ASIN_CHARS, k=8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _product(rng: random.Random, index: int, asin: str, kind: ProductType,
             brands: tuple[str, ...]) -> Product:
    attributes = tuple(rng.sample(kind.attributes, rng.randint(3, 5)))
    options = tuple((name, _offered(rng, pool)) for name, pool in kind.options)
    low, high = kind.price
    price = round(rng.uniform(low, high), 2)
    brand = rng.choice(brands)
    uses = rng.sample(vocab.USES[kind.category], 2)
    title = f"{brand} {rng.choice(vocab.TITLE_WORDS[kind.category])} {capitalize(kind.name)}"
    title += " - " + ", ".join(capitalize(a) for a in attributes[:rng.randint(1, 2)])
    if rng.random() < 0.3:
        title += f", {capitalize(rng.choice(options[0][1]))}"
    description = (f"The {brand} {kind.name} is made for {uses[0]}. "
                   f"{rng.choice(vocab.BENEFITS).capitalize()}.")
    features = [f"{capitalize(a)}: {rng.choice(vocab.BENEFITS)}" for a in attributes]
    features.append(f"Great for {uses[1]}")
    rng.shuffle(features)
    return Product(index, asin, title, kind.name, kind.category, attributes, options, price,
                   description, tuple(features))


def _offered(rng: random.Random, pool: tuple[str, ...]) -> tuple[str, ...]:
    """2–6 values of ``pool``, in pool order (as a shop lists sizes and colours)."""
    chosen = rng.sample(range(len(pool)), rng.randint(2, min(6, len(pool))))
    return tuple(pool[i] for i in sorted(chosen))


def listing(words: tuple[str, ...]) -> str:
    """"a", "a and b", "a, b and c"."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f" and {words[-1]}"
