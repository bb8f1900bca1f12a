"""The generated knowledge base: invented entities, typed relations, passages and questions.

A seed fixes everything. About 3,000 entities (countries, cities, universities, people, films,
novels, companies, bands) get invented, pronounceable names, unique after answer
normalisation; people share first names and surnames, and some surnames are city names, so a
name alone rarely picks one passage. Functional relations tie them together (a film is
``directed_by`` one person, a person is ``born_in`` one city, a city is ``located_in`` one
country, ...). Each entity is rendered as one or two encyclopedia-style passages (people with a
career get an early-life and a career passage under the same title, as wiki chunks do), mixed
with facts no question asks about (years, genres, cast, offices, a later home town, a teaching
post) that mention other entities of the same type as the answer.

A fact can be stated by several passages (a film's director is named on the film's passage and
on the director's career passage; a city lists some natives); every passage that states it
supports the hop. Questions follow relation chains of one to three hops, phrased
compositionally ("In which country is the birthplace of the director of the film X
located?"); chains that revisit an entity are skipped. Question texts are unique, shuffled by
the seed and split into ``eval`` (the first ``eval_size``) and ``train`` (the rest).
"""

from __future__ import annotations

import functools
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from envs.searchqa.format import normalize_answer
from envs.searchqa.retrieval import BM25Retriever, Hop, Passage, Question

COUNTS = {"country": 30, "city": 300, "university": 80, "person": 1500, "film": 500,
          "book": 300, "company": 250, "band": 150}
OCCUPATIONS = {"director": 200, "author": 150, "founder": 250, "musician": 450, "actor": 250,
               "scientist": 200}
_JOB_TITLES = {"director": "a film director", "author": "a novelist", "founder": "an entrepreneur",
               "musician": "a musician", "actor": "an actor", "scientist": "a scientist"}
MAX_HOPS = 3


class Relation(NamedTuple):
    """A functional relation: how to ask for its object, name it, and search for it."""

    subject: str
    object: str
    question: str  # asks for the object of a subject phrase
    phrase: str  # a noun phrase for the object of a subject phrase
    keywords: str  # words the stating sentences use, for the expert's queries


RELATIONS = {
    "directed_by": Relation("film", "person", "Who directed {}?", "the director of {}",
                            "film directed by"),
    "written_by": Relation("book", "person", "Who wrote {}?", "the author of {}",
                           "novel written by"),
    "founded_by": Relation("company", "person", "Who founded {}?", "the founder of {}",
                           "company founded by"),
    "headquartered_in": Relation("company", "city", "In which city is {} headquartered?",
                                 "the headquarters city of {}", "headquartered in"),
    "formed_in": Relation("band", "city", "In which city was {} formed?",
                          "the city where {} was formed", "band formed in"),
    "born_in": Relation("person", "city", "In which city was {} born?", "the birthplace of {}",
                        "born in"),
    "studied_at": Relation("person", "university", "Which university did {} attend?",
                           "the university that {} attended", "studied at"),
    "member_of": Relation("person", "band", "Which band is {} a member of?",
                          "the band that {} plays in", "member of the band"),
    "based_in": Relation("university", "city", "In which city is {} located?",
                         "the city that is home to {}", "university located in"),
    "located_in": Relation("city", "country", "In which country is {} located?",
                           "the country where {} is located", "city located in"),
    "capital": Relation("country", "city", "What is the capital of {}?", "the capital of {}",
                        "capital"),
}

_ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
           "gr", "kr", "tr", "st", "th", "sh", "ch", "")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei", "ou")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "th", "rd", "nd")
_ADJECTIVES = ("Silent", "Crimson", "Broken", "Hidden", "Last", "Golden", "Distant", "Frozen",
               "Burning", "Quiet", "Wild", "Lost", "Hollow", "Bright", "Iron", "Endless")
_NOUNS = ("River", "Garden", "Winter", "Harbor", "Mirror", "Crown", "Shadow", "Letter",
          "Voyage", "Storm", "Orchard", "Tower", "Lantern", "Song", "Bridge", "Empire")
_COMPANY_KINDS = {"Systems": "software", "Industries": "manufacturing", "Foods": "food",
                  "Motors": "automotive", "Labs": "biotechnology", "Media": "media",
                  "Energy": "energy", "Airlines": "aviation", "Textiles": "textile",
                  "Shipping": "logistics", "Robotics": "robotics", "Pharma": "pharmaceutical"}
_BAND_NOUNS = ("Foxes", "Lanterns", "Echoes", "Wolves", "Sparrows", "Engines", "Tides",
               "Ghosts", "Comets", "Ravens", "Pilots", "Harbors")
_GENRES = ("drama", "comedy", "thriller", "science fiction", "documentary", "western",
           "musical", "horror")
_BOOK_GENRES = ("historical", "crime", "fantasy", "literary", "adventure", "satirical")
_MUSIC = ("rock", "folk", "jazz", "electronic", "punk", "pop")
_FIELDS = ("physics", "law", "history", "economics", "architecture", "medicine", "painting",
           "mathematics", "philosophy", "engineering")
_INSTRUMENTS = ("guitar", "drums", "bass", "piano", "violin", "saxophone")
_FORMS = ("Republic", "Kingdom", "Federation", "Commonwealth")
_CITY_SUFFIXES = ("", "", "", "", "ford", "holm", "grad", "mouth", "stad", "burg")
_COUNTRY_SUFFIXES = ("ia", "land", "stan", "ora", "esh", "avia")


class Entity(NamedTuple):
    """One entity: ``id`` indexes ``World.entities``; ``aliases`` are extra gold answers."""

    id: int
    type: str
    name: str
    aliases: tuple[str, ...] = ()


class World(NamedTuple):
    """The generated entities, their relation facts and their rendering attributes."""

    entities: list[Entity]
    by_type: dict[str, list[int]]
    facts: dict[tuple[int, str], int]  # (subject id, relation) -> object id
    attrs: list[dict[str, Any]]  # per entity: years, genres, distractor links, occupation


class Dataset(NamedTuple):
    """A corpus with its retriever and the questions of each split."""

    passages: tuple[Passage, ...]
    texts: dict[str, str]  # passage text by id
    questions: dict[str, tuple[Question, ...]]
    retriever: BM25Retriever


@functools.lru_cache(maxsize=4)
def generated(seed: int = 0, eval_size: int = 1000) -> Dataset:
    """The generated knowledge base of ``seed`` with its BM25 index, once per process."""
    world = make_world(random.Random(seed))
    passages, support = render(world)
    questions = make_questions(world, support)
    random.Random(seed + 1).shuffle(questions)
    if not 0 < eval_size < len(questions):
        raise ValueError(f"eval_size must be in 1..{len(questions) - 1}, got {eval_size}")
    splits = {"eval": tuple(questions[:eval_size]), "train": tuple(questions[eval_size:])}
    return Dataset(passages, {p.id: p.text for p in passages}, splits, BM25Retriever(passages))


class _Names:
    """Invented, pronounceable names, unique after answer normalisation."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int) -> str:
        """A capitalised invented word of ``syllables`` syllables."""
        r = self.rng
        # Only the first syllable may lack a consonant, so vowels never pile up.
        parts = [r.choice(_ONSETS if i == 0 else _ONSETS[:-1]) + r.choice(_VOWELS)
                 for i in range(syllables)]
        return ("".join(parts) + r.choice(_CODAS)).capitalize()

    def unique(self, make: Callable[[], str]) -> str:
        """The first name from ``make()`` not used before (in normalised form)."""
        while True:
            name = make()
            key = normalize_answer(name)
            if key and key not in self.used:
                self.used.add(key)
                return name


def make_world(rng: random.Random) -> World:
    """Entities, functional facts and attributes, drawn from ``rng`` in a fixed order."""
    names, cities = _Names(rng), []
    world = World([], defaultdict(list), {}, [])
    for kind, make in _name_makers(names, rng, cities).items():
        for _ in range(COUNTS[kind]):
            name = names.unique(make)
            if kind == "city":
                cities.append(name)
            aliases = (f"{rng.choice(_FORMS)} of {name}",) if kind == "country" else ()
            world.by_type[kind].append(len(world.entities))
            world.entities.append(Entity(len(world.entities), kind, name, aliases))
            world.attrs.append({"year": rng.randint(1850, 1975)})
    _link_places(world, rng)
    _link_people(world, rng)
    _link_works(world, rng)
    return world


def _name_makers(names: _Names, rng: random.Random, cities: Sequence[str]
                 ) -> dict[str, Callable[[], str]]:
    """One name maker per entity type, in creation order (``cities`` fills up first)."""
    firsts = [names.word(2) for _ in range(150)]
    surnames = [names.word(rng.choice((2, 2, 3))) for _ in range(700)]

    def city() -> str:
        return names.word(rng.choice((2, 3))) + rng.choice(_CITY_SUFFIXES)

    def person() -> str:
        last = rng.choice(cities) if rng.random() < 0.05 else rng.choice(surnames)
        return f"{rng.choice(firsts)} {last}"

    def university() -> str:
        pattern = rng.randrange(3)
        if pattern == 0:
            return f"University of {rng.choice(cities)}"
        return f"{names.word(2)} {('Institute of Technology', 'College')[pattern - 1]}"

    def title(nouns: Sequence[str]) -> str:
        root, noun = names.word(rng.choice((2, 3))), rng.choice(nouns)
        return rng.choice((f"{rng.choice(_ADJECTIVES)} {root}", f"{noun} of {root}",
                           f"{root} {noun}", f"{root}'s {noun}"))

    return {
        "country": lambda: names.word(2) + rng.choice(_COUNTRY_SUFFIXES),
        "city": city,
        "university": university,
        "person": person,
        "film": lambda: title(_NOUNS),
        "book": lambda: title([f"{noun}s" for noun in _NOUNS]),
        "company": lambda: f"{names.word(2)} {rng.choice(list(_COMPANY_KINDS))}",
        "band": lambda: f"{names.word(2)} {rng.choice(_BAND_NOUNS)}",
    }


def _link_places(world: World, rng: random.Random) -> None:
    """Cities into countries (each country's first city is its capital), universities into
    cities ("University of X" into X)."""
    countries, cities = world.by_type["country"], world.by_type["city"]
    for i, city in enumerate(cities):
        country = countries[i] if i < len(countries) else rng.choice(countries)
        world.facts[city, "located_in"] = country
        world.attrs[city].update(population=rng.randint(20, 3000) * 1000,
                                 river=_river(world, rng))
        if i < len(countries):
            world.facts[country, "capital"] = city
    for country in countries:
        world.attrs[country].update(population=rng.randint(1, 90),
                                    currency=f"{world.entities[country].name[:4]} crown")
    by_name = {world.entities[c].name: c for c in cities}
    for uni in world.by_type["university"]:
        name = world.entities[uni].name
        city = by_name.get(name.removeprefix("University of "), rng.choice(cities))
        world.facts[uni, "based_in"] = city


def _river(world: World, rng: random.Random) -> str:
    return world.entities[rng.choice(world.by_type["country"])].name[:3] + rng.choice(
        ("wa", "ne", "ro", "dal"))


def _link_people(world: World, rng: random.Random) -> None:
    """Occupations, birthplaces, universities and distractor links (a later home, a post)."""
    people = list(world.by_type["person"])
    cities, unis = world.by_type["city"], world.by_type["university"]
    occupations = [o for o, n in OCCUPATIONS.items() for _ in range(n)]
    rng.shuffle(occupations)
    for person, occupation in zip(people, occupations):
        born, uni = rng.choice(cities), rng.choice(unis)
        world.facts[person, "born_in"], world.facts[person, "studied_at"] = born, uni
        world.attrs[person].update(
            occupation=occupation, field=rng.choice(_FIELDS), moved_to=_other(rng, cities, born),
            pronoun=rng.choice(("He", "She")), taught_at=_other(rng, unis, uni),
            instrument=rng.choice(_INSTRUMENTS))


def _other(rng: random.Random, pool: Sequence[int], avoid: int) -> int:
    """A random member of ``pool`` other than ``avoid``: a distractor, never the fact itself."""
    while (pick := rng.choice(pool)) == avoid:
        pass
    return pick


def _link_works(world: World, rng: random.Random) -> None:
    """Films, novels, companies and bands get their makers (each maker has 1–3 works)."""
    by_job = defaultdict(list)
    for p in world.by_type["person"]:
        by_job[world.attrs[p]["occupation"]].append(p)
    companies, cities = world.by_type["company"], world.by_type["city"]
    for i, film in enumerate(world.by_type["film"]):
        director = by_job["director"][i % len(by_job["director"])]
        world.facts[film, "directed_by"] = director
        world.attrs[film].update(genre=rng.choice(_GENRES), cast=rng.sample(by_job["actor"], 2),
                                 producer=rng.choice(companies), year=_later(world, director, rng))
    for i, book in enumerate(world.by_type["book"]):
        author = by_job["author"][i % len(by_job["author"])]
        world.facts[book, "written_by"] = author
        world.attrs[book].update(genre=rng.choice(_BOOK_GENRES), publisher=rng.choice(companies),
                                 year=_later(world, author, rng))
    for company, founder in zip(companies, by_job["founder"]):
        hq = rng.choice(cities)
        world.facts[company, "founded_by"], world.facts[company, "headquartered_in"] = founder, hq
        world.attrs[company].update(offices=_other(rng, cities, hq),
                                    year=_later(world, founder, rng))
    musicians = by_job["musician"]
    for b, band in enumerate(world.by_type["band"]):
        world.facts[band, "formed_in"] = rng.choice(cities)
        world.attrs[band]["genre"] = rng.choice(_MUSIC)
        for musician in musicians[3 * b:3 * b + 3]:
            world.facts[musician, "member_of"] = band


def _later(world: World, person: int, rng: random.Random) -> int:
    """A year in the person's working life, so works never predate their makers."""
    return world.attrs[person]["year"] + rng.randint(22, 50)


def render(world: World) -> tuple[tuple[Passage, ...], dict[tuple[int, str], tuple[str, ...]]]:
    """Every entity's passages, and for each fact the ids of the passages that state it."""
    reverse = _reverse_facts(world)
    passages: list[Passage] = []
    support: dict[tuple[int, str], list[str]] = defaultdict(list)
    for entity in world.entities:
        for text, stated in _PASSAGES[entity.type](world, entity, reverse):
            doc_id = str(len(passages))
            passages.append(Passage(doc_id, entity.name, text))
            for fact in stated:
                support[fact].append(doc_id)
    return tuple(passages), {fact: tuple(ids) for fact, ids in support.items()}


def _reverse_facts(world: World) -> dict[tuple[int, str], list[int]]:
    """``(object, relation) -> subjects``, in id order."""
    reverse = defaultdict(list)
    for (subject, relation), obj in world.facts.items():
        reverse[obj, relation].append(subject)
    return reverse


Rendered = list[tuple[str, list[tuple[int, str]]]]  # (text, facts it states) per passage


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def _country(world: World, e: Entity, reverse) -> Rendered:
    capital = world.facts[e.id, "capital"]
    others = [c for c in reverse[e.id, "located_in"] if c != capital][:3]
    a, n = world.attrs[e.id], world.entities
    text = (f"{e.name}, officially the {e.aliases[0]}, is a country with about "
            f"{a['population']} million inhabitants. Its capital is {n[capital].name}.")
    if others:
        text += f" Other cities in {e.name} include {_and([n[c].name for c in others])}."
    text += f" Its currency is the {a['currency']}, introduced in {a['year']}."
    return [(text, [(e.id, "capital"), (capital, "located_in"),
                    *((c, "located_in") for c in others)])]


def _city(world: World, e: Entity, reverse) -> Rendered:
    n, a = world.entities, world.attrs[e.id]
    country = world.facts[e.id, "located_in"]
    is_capital = world.facts[country, "capital"] == e.id
    role = f"the capital of {n[country].name}" if is_capital else "a city"
    text = (f"{e.name} is {role}, located in {n[country].name}. It lies on the {a['river']} "
            f"river and has about {a['population']:,} inhabitants.")
    stated = [(e.id, "located_in")] + ([(country, "capital")] if is_capital else [])
    natives = reverse[e.id, "born_in"][:2]
    if natives:
        text += f" People born in {e.name} include {_and([n[p].name for p in natives])}."
        stated += [(p, "born_in") for p in natives]
    for uni in reverse[e.id, "based_in"]:
        text += f" It is home to {n[uni].name}."
        stated.append((uni, "based_in"))
    return [(text, stated)]


def _university(world: World, e: Entity, reverse) -> Rendered:
    n, a = world.entities, world.attrs[e.id]
    city = world.facts[e.id, "based_in"]
    alumni = reverse[e.id, "studied_at"][:2]
    text = f"{e.name} is a public university located in {n[city].name}, founded in {a['year']}."
    if alumni:
        text += f" Its alumni include {_and([n[p].name for p in alumni])}."
    return [(text, [(e.id, "based_in"), *((p, "studied_at") for p in alumni)])]


def _person(world: World, e: Entity, reverse) -> Rendered:
    n, a = world.entities, world.attrs[e.id]
    city, uni = world.facts[e.id, "born_in"], world.facts[e.id, "studied_at"]
    early = (f"{e.name} (born {a['year']} in {n[city].name}) is {_JOB_TITLES[a['occupation']]}. "
             f"{a['pronoun']} studied {a['field']} at {n[uni].name} and later moved to "
             f"{n[a['moved_to']].name}.")
    if a["occupation"] == "scientist":
        early += f" {a['pronoun']} taught {a['field']} at {n[a['taught_at']].name} for a decade."
    rendered = [(early, [(e.id, "born_in"), (e.id, "studied_at")])]
    career = _career(world, e, reverse)
    return rendered + ([career] if career else [])


def _career(world: World, e: Entity, reverse) -> tuple[str, list[tuple[int, str]]] | None:
    n, a = world.entities, world.attrs[e.id]
    job, he = a["occupation"], a["pronoun"]
    if job == "director":
        films = reverse[e.id, "directed_by"]
        listed = _and([f"{n[f].name} ({world.attrs[f]['year']})" for f in films])
        text = (f"As a film director, {e.name} made {listed}. {he} began as a cinema critic in "
                f"{n[a['moved_to']].name}.")
        return text, [(f, "directed_by") for f in films]
    if job == "author":
        books = reverse[e.id, "written_by"]
        return (f"{e.name} is the author of the novels {_and([n[b].name for b in books])}.",
                [(b, "written_by") for b in books])
    if job == "founder":
        company = reverse[e.id, "founded_by"][0]
        text = (f"In {world.attrs[company]['year']}, {e.name} founded {n[company].name}, "
                f"and {he.lower()} led it for many years.")
        return text, [(company, "founded_by")]
    if job == "musician" and (e.id, "member_of") in world.facts:
        band = world.facts[e.id, "member_of"]
        text = f"{e.name} is a member of the band {n[band].name}, playing the {a['instrument']}."
        return text, [(e.id, "member_of")]
    if job == "actor":
        films = [f for f in world.by_type["film"] if e.id in world.attrs[f]["cast"]][:3]
        if films:
            return f"{e.name} starred in {_and([n[f].name for f in films])}.", []
    return None


def _film(world: World, e: Entity, reverse) -> Rendered:
    n, a = world.entities, world.attrs[e.id]
    director = world.facts[e.id, "directed_by"]
    cast = _and([n[p].name for p in a["cast"]])
    text = (f"{e.name} is a {a['year']} {a['genre']} film directed by {n[director].name}. "
            f"It stars {cast} and was produced by {n[a['producer']].name}.")
    return [(text, [(e.id, "directed_by")])]


def _book(world: World, e: Entity, reverse) -> Rendered:
    n, a = world.entities, world.attrs[e.id]
    author = world.facts[e.id, "written_by"]
    text = (f"{e.name} is a {a['genre']} novel written by {n[author].name}, first published "
            f"in {a['year']} by {n[a['publisher']].name}.")
    return [(text, [(e.id, "written_by")])]


def _company(world: World, e: Entity, reverse) -> Rendered:
    n, a = world.entities, world.attrs[e.id]
    founder, hq = world.facts[e.id, "founded_by"], world.facts[e.id, "headquartered_in"]
    industry = _COMPANY_KINDS[e.name.rsplit(" ", 1)[1]]
    text = (f"{e.name} is a {industry} company founded in {a['year']} by {n[founder].name}. "
            f"It is headquartered in {n[hq].name} and has offices in {n[a['offices']].name}.")
    return [(text, [(e.id, "founded_by"), (e.id, "headquartered_in")])]


def _band(world: World, e: Entity, reverse) -> Rendered:
    n, a = world.entities, world.attrs[e.id]
    members = reverse[e.id, "member_of"]
    text = (f"{e.name} is a {a['genre']} band formed in {n[world.facts[e.id, 'formed_in']].name} "
            f"in {a['year']}. Its members are {_and([n[p].name for p in members])}.")
    return [(text, [(e.id, "formed_in"), *((p, "member_of") for p in members)])]


_PASSAGES: dict[str, Callable[[World, Entity, Any], Rendered]] = {
    "country": _country, "city": _city, "university": _university, "person": _person,
    "film": _film, "book": _book, "company": _company, "band": _band,
}
_MENTION = {"film": "the film {}", "book": "the novel {}", "band": "the band {}"}


def make_questions(world: World, support: dict[tuple[int, str], tuple[str, ...]]
                   ) -> list[Question]:
    """Every 1..MAX_HOPS-hop question of the world, in a fixed order, texts unique."""
    questions: dict[str, Question] = {}
    for entity in world.entities:
        for chain in _chains(entity.type):
            question = _question(world, support, entity, chain)
            if question is not None and question.question not in questions:
                questions[question.question] = question
    return list(questions.values())


@functools.cache
def _chains(start: str) -> tuple[tuple[str, ...], ...]:
    """Relation sequences of 1..MAX_HOPS hops whose types line up, starting at ``start``."""
    chains, frontier = [], [((), start)]
    for _ in range(MAX_HOPS):
        frontier = [(chain + (name,), rel.object) for chain, kind in frontier
                    for name, rel in RELATIONS.items() if rel.subject == kind]
        chains += [chain for chain, _ in frontier]
    return tuple(chains)


def _question(world: World, support, start: Entity, chain: tuple[str, ...]) -> Question | None:
    path = [start.id]
    for relation in chain:
        obj = world.facts.get((path[-1], relation))
        if obj is None or obj in path:
            return None
        path.append(obj)
    names = [world.entities[i].name for i in path]
    phrase = _MENTION.get(start.type, "{}").format(start.name)
    hops = []
    for k, relation in enumerate(chain):
        rel = RELATIONS[relation]
        need = rel.phrase.format(phrase if k == 0 else names[k])
        queries = (f"{names[k]} {rel.keywords}", names[k], f"{need} {names[k]}")
        hops.append(Hop(support[path[k], relation], need, names[k + 1], queries))
        if k < len(chain) - 1:
            phrase = rel.phrase.format(phrase)
    text = RELATIONS[chain[-1]].question.format(phrase)
    answer = world.entities[path[-1]]
    return Question(f"{start.type}-{start.id}-{'.'.join(chain)}", text,
                    (answer.name, *answer.aliases), tuple(hops), _wrong(world, answer))


def _wrong(world: World, answer: Entity) -> str:
    """The next entity of the answer's type: a plausible, wrong answer."""
    same = world.by_type[answer.type]  # consecutive ids: entities are made type by type
    return world.entities[same[(answer.id - same[0] + 1) % len(same)]].name
