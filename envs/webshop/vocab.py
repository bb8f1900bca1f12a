"""The shop's vocabulary: categories, product types, their attributes and buying options.

Each :class:`ProductType` lists the attributes a product of that type may have (its own and
its category's) and its option schema (option name → the values a product may offer). Types
in one category share words ("face moisturizer" / "body lotion", "usb c cable" / "hdmi
cable") and attribute pools, so a query for one type also retrieves its neighbours: the
distractors that make search non-trivial. Option value pools of one type are disjoint, so a
clicked value names exactly one option.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ProductType:
    """A kind of product: what a goal asks for and what the type score compares."""

    name: str  # lower case, as instructions and queries write it
    category: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (option name, value pool)
    price: tuple[float, float]  # (low, high) in dollars


COLORS = ("black", "white", "navy blue", "gray", "red", "green", "pink", "beige", "brown",
          "purple", "light blue", "olive green", "burgundy", "teal", "yellow", "orange",
          "charcoal", "ivory", "khaki", "rose gold")
APPAREL_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large")
SHOE_SIZES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12")
PACKS = ("1 count", "2 pack", "3 pack", "4 pack", "6 pack", "8 pack", "12 pack", "24 pack")
FLUID_SIZES = ("1 fl oz", "1.7 fl oz", "2 fl oz", "3.4 fl oz", "4 fl oz", "8 fl oz",
               "12 fl oz", "16 fl oz", "33.8 fl oz")
WEIGHTS = ("2 ounce", "4 ounce", "6 ounce", "8 ounce", "12 ounce", "16 ounce", "1.5 pound",
           "2 pound", "5 pound")
SCENTS = ("lavender", "unscented", "bright citrus", "vanilla", "eucalyptus mint", "coconut",
          "rose", "sandalwood", "ocean breeze", "fresh linen", "green tea", "cherry blossom")
SHADES = ("nude", "ruby red", "coral", "berry", "mauve", "plum", "rosewood", "fuchsia",
          "peach", "classic red", "warm beige", "light ivory", "medium tan", "deep espresso")
COUNTS = ("30 count", "60 count", "90 count", "120 count", "180 count", "240 count")
CABLE_LENGTHS = ("1 foot", "3 feet", "6 feet", "10 feet", "15 feet", "25 feet")
DENIM_COLORS = ("light wash", "medium wash", "dark wash", "black denim", "stone wash",
                "vintage blue", "gray denim")
WAIST_SIZES = ("28w x 30l", "30w x 30l", "30w x 32l", "32w x 30l", "32w x 32l", "34w x 32l",
               "36w x 32l", "38w x 34l")
BED_SIZES = ("twin", "twin xl", "full", "queen", "king", "california king")
PET_SIZES = ("small breed", "medium breed", "large breed", "extra large breed")
PIECES = ("100 pieces", "250 pieces", "300 pieces", "500 pieces", "750 pieces",
          "1000 pieces", "1500 pieces")

_CATEGORY_ATTRIBUTES = {
    "beauty": ("cruelty free", "paraben free", "long lasting", "natural ingredients",
               "dermatologist tested", "fragrance free", "vegan", "travel size",
               "sensitive skin", "hypoallergenic"),
    "grocery": ("gluten free", "non gmo", "organic", "kosher certified", "sugar free",
                "low calorie", "keto friendly", "vegan", "high protein", "individually wrapped",
                "dairy free", "low sodium", "plant based"),
    "fashion": ("machine wash", "hand wash", "soft material", "daily wear", "imported",
                "wrinkle free", "moisture wicking"),
    "shoes": ("non slip", "rubber sole", "lightweight", "breathable", "memory foam",
              "arch support", "water resistant"),
    "electronics": ("fast charging", "wireless", "portable", "usb c", "high definition",
                    "long battery life", "plug and play", "water resistant", "heavy duty"),
    "home": ("easy to clean", "machine washable", "space saving", "easy assembly", "durable",
             "eco friendly", "living room", "bedroom"),
    "kitchen": ("dishwasher safe", "bpa free", "non stick", "stainless steel", "heat resistant",
                "easy to clean", "food grade", "leak proof"),
    "sports": ("lightweight", "portable", "non slip", "durable", "adjustable", "quick dry",
               "outdoor use", "easy to carry"),
    "pets": ("natural ingredients", "grain free", "easy to clean", "durable", "non toxic",
             "made in usa", "vet recommended"),
    "toys": ("educational", "non toxic", "battery operated", "ages 3 and up", "stem learning",
             "gift idea", "easy to assemble", "for kids"),
    "office": ("durable", "school supplies", "eco friendly", "acid free", "easy to use",
               "heavy duty", "refillable"),
    "health": ("sugar free", "gluten free", "non gmo", "vegan", "easy to swallow",
               "third party tested", "natural ingredients", "immune support"),
}

# (name, category, own attributes, options, price range)
_TYPES: tuple[tuple, ...] = (
    ("lipstick", "beauty", ("matte finish", "high pigment", "moisturizing", "smudge proof"),
     (("color", SHADES),), (6.0, 32.0)),
    ("face moisturizer", "beauty", ("anti aging", "oil free", "spf 30", "hyaluronic acid",
                                    "dry skin", "non comedogenic"),
     (("size", FLUID_SIZES[:6]),), (9.0, 65.0)),
    ("body lotion", "beauty", ("dry skin", "shea butter", "fast absorbing", "non greasy",
                               "vitamin e"),
     (("scent", SCENTS), ("size", FLUID_SIZES[3:])), (5.0, 28.0)),
    ("shampoo", "beauty", ("sulfate free", "hair growth", "color safe", "dry hair",
                           "argan oil", "anti dandruff"),
     (("scent", SCENTS), ("size", FLUID_SIZES[4:])), (6.0, 38.0)),
    ("hair conditioner", "beauty", ("sulfate free", "color safe", "dry hair", "argan oil",
                                    "detangling", "curly hair"),
     (("size", FLUID_SIZES[4:]),), (6.0, 34.0)),
    ("deodorant", "beauty", ("aluminum free", "48 hour protection", "baking soda free",
                             "sensitive skin"),
     (("scent", SCENTS), ("size", PACKS[:5])), (4.0, 26.0)),
    ("dark chocolate bar", "grocery", ("fair trade", "high cacao", "no added sugar"),
     (("flavor", ("sea salt", "almond", "mint", "orange", "raspberry", "salted caramel",
                  "espresso", "coconut", "hazelnut")), ("size", PACKS)), (3.0, 45.0)),
    ("protein bar", "grocery", ("high fiber", "no artificial sweeteners", "low carb"),
     (("flavor", ("chocolate peanut butter", "cookie dough", "birthday cake", "vanilla almond",
                  "double chocolate", "lemon", "salted caramel")), ("size", PACKS[3:])),
     (12.0, 48.0)),
    ("ground coffee", "grocery", ("fair trade", "low acid", "single origin", "dark roast",
                                  "medium roast"),
     (("flavor", ("original", "french vanilla", "hazelnut", "mocha", "caramel", "cinnamon",
                  "decaf")), ("size", WEIGHTS[3:])), (7.0, 40.0)),
    ("green tea", "grocery", ("antioxidant rich", "caffeine free", "loose leaf", "tea bags"),
     (("flavor", ("jasmine", "mint", "lemon ginger", "honey", "matcha", "peach", "original")),
      ("size", ("20 count", "40 count", "100 count", "6 pack of 20"))), (4.0, 30.0)),
    ("trail mix", "grocery", ("no added sugar", "resealable bag", "roasted nuts", "heart healthy"),
     (("flavor", ("classic", "tropical", "chocolate", "cranberry", "sweet and salty", "berry")),
      ("size", WEIGHTS)), (4.0, 32.0)),
    ("pasta sauce", "grocery", ("no added sugar", "family size", "slow cooked", "italian style"),
     (("flavor", ("marinara", "tomato basil", "roasted garlic", "vodka", "arrabbiata",
                  "mushroom")), ("size", PACKS[:6])), (3.0, 36.0)),
    ("women's t-shirt", "fashion", ("short sleeve", "long sleeve", "crew neck", "v neck",
                                    "cotton blend", "loose fit", "slim fit"),
     (("color", COLORS), ("size", APPAREL_SIZES)), (8.0, 30.0)),
    ("men's dress shirt", "fashion", ("long sleeve", "slim fit", "regular fit",
                                      "button closure", "cotton", "easy care"),
     (("color", COLORS), ("size", APPAREL_SIZES)), (16.0, 55.0)),
    ("women's jumpsuit", "fashion", ("elastic waist", "wide leg", "short sleeve", "sleeveless",
                                     "polyester spandex", "high waist"),
     (("color", COLORS), ("size", APPAREL_SIZES)), (18.0, 60.0)),
    ("men's hoodie", "fashion", ("fleece lined", "drawstring closure", "long sleeve", "zip up",
                                 "relaxed fit", "kangaroo pocket"),
     (("color", COLORS), ("size", APPAREL_SIZES)), (15.0, 58.0)),
    ("women's leggings", "fashion", ("high waist", "tummy control", "squat proof",
                                     "polyester spandex", "quick dry", "side pockets"),
     (("color", COLORS), ("size", APPAREL_SIZES)), (10.0, 42.0)),
    ("men's jeans", "fashion", ("slim fit", "straight leg", "stretch denim", "button closure",
                                "relaxed fit", "classic fit"),
     (("color", DENIM_COLORS), ("size", WAIST_SIZES)), (20.0, 70.0)),
    ("running shoes", "shoes", ("cushioned", "mesh upper", "lace up", "shock absorbing"),
     (("color", COLORS), ("size", SHOE_SIZES)), (28.0, 120.0)),
    ("women's sandals", "shoes", ("open toe", "ankle strap", "flat sole", "wedge heel"),
     (("color", COLORS), ("size", SHOE_SIZES)), (15.0, 60.0)),
    ("men's boots", "shoes", ("steel toe", "waterproof", "leather", "slip resistant",
                              "lace up"),
     (("color", COLORS[:10]), ("size", SHOE_SIZES)), (40.0, 160.0)),
    ("house slippers", "shoes", ("fuzzy", "indoor outdoor", "faux fur", "slip on"),
     (("color", COLORS), ("size", SHOE_SIZES)), (10.0, 40.0)),
    ("women's heels", "shoes", ("pointed toe", "block heel", "ankle strap", "slip on"),
     (("color", COLORS), ("size", SHOE_SIZES)), (25.0, 90.0)),
    ("canvas sneakers", "shoes", ("slip on", "lace up", "low top", "high top"),
     (("color", COLORS), ("size", SHOE_SIZES)), (18.0, 70.0)),
    ("wireless earbuds", "electronics", ("bluetooth", "noise cancelling", "charging case",
                                         "touch control", "built in microphone"),
     (("color", COLORS[:8]),), (15.0, 150.0)),
    ("phone charger", "electronics", ("wall charger", "dual port", "foldable plug",
                                      "compact design"),
     (("color", COLORS[:4]), ("wattage", ("20w", "30w", "45w", "65w", "100w"))), (8.0, 50.0)),
    ("usb c cable", "electronics", ("braided", "data transfer", "tangle free"),
     (("color", COLORS[:6]), ("size", CABLE_LENGTHS)), (5.0, 25.0)),
    ("bluetooth speaker", "electronics", ("bluetooth", "waterproof", "loud sound", "deep bass",
                                          "built in microphone"),
     (("color", COLORS[:10]),), (20.0, 180.0)),
    ("memory card", "electronics", ("high speed", "4k video", "sd adapter"),
     (("capacity", ("32gb", "64gb", "128gb", "256gb", "512gb", "1tb")), ("size", PACKS[:4])),
     (6.0, 90.0)),
    ("hdmi cable", "electronics", ("braided", "4k video", "high speed", "gold plated"),
     (("size", CABLE_LENGTHS), ("pack", PACKS[:4])), (6.0, 35.0)),
    ("throw pillow cover", "home", ("decorative", "hidden zipper", "velvet", "farmhouse style"),
     (("color", COLORS), ("size", ("16x16 inch", "18x18 inch", "20x20 inch", "24x24 inch"))),
     (8.0, 35.0)),
    ("bed sheet set", "home", ("deep pocket", "microfiber", "breathable", "wrinkle resistant"),
     (("color", COLORS), ("size", BED_SIZES)), (20.0, 90.0)),
    ("blackout curtains", "home", ("thermal insulated", "noise reducing", "grommet top",
                                   "light blocking"),
     (("color", COLORS), ("size", ("42x63 inch", "52x84 inch", "52x95 inch", "52x108 inch"))),
     (15.0, 70.0)),
    ("bath towel set", "home", ("quick dry", "highly absorbent", "cotton", "hotel quality"),
     (("color", COLORS), ("pack", ("2 piece set", "4 piece set", "6 piece set", "8 piece set"))),
     (18.0, 75.0)),
    ("area rug", "home", ("non shedding", "stain resistant", "low pile", "boho style"),
     (("color", COLORS), ("size", ("2x3 ft", "3x5 ft", "4x6 ft", "5x7 ft", "8x10 ft"))),
     (25.0, 220.0)),
    ("scented candle", "home", ("soy wax", "long burning", "gift set", "natural wax"),
     (("scent", SCENTS), ("size", WEIGHTS[1:6])), (8.0, 40.0)),
    ("water bottle", "kitchen", ("insulated", "double wall", "wide mouth", "straw lid"),
     (("color", COLORS), ("size", ("12 oz", "18 oz", "24 oz", "32 oz", "40 oz", "64 oz"))),
     (10.0, 45.0)),
    ("frying pan", "kitchen", ("oven safe", "induction compatible", "ceramic coating",
                               "cast iron"),
     (("color", COLORS[:6]), ("size", ("8 inch", "10 inch", "11 inch", "12 inch"))),
     (15.0, 85.0)),
    ("food storage containers", "kitchen", ("airtight", "microwave safe", "freezer safe",
                                            "stackable"),
     (("pack", ("5 piece set", "10 piece set", "12 piece set", "24 piece set")),),
     (12.0, 50.0)),
    ("coffee mug", "kitchen", ("ceramic", "microwave safe", "large capacity", "gift idea"),
     (("color", COLORS), ("size", ("11 oz", "14 oz", "16 oz", "20 oz"))), (7.0, 30.0)),
    ("cutting board", "kitchen", ("bamboo", "juice groove", "reversible", "non slip feet"),
     (("size", ("small", "medium", "large", "extra large", "3 piece set")),), (9.0, 45.0)),
    ("kitchen knife set", "kitchen", ("high carbon", "ergonomic handle", "knife block",
                                      "razor sharp"),
     (("color", COLORS[:6]), ("pack", ("5 piece set", "8 piece set", "14 piece set"))),
     (20.0, 150.0)),
    ("yoga mat", "sports", ("extra thick", "carrying strap", "eco friendly", "tpe material"),
     (("color", COLORS), ("size", ("4mm", "6mm", "8mm", "10mm"))), (15.0, 60.0)),
    ("resistance bands", "sports", ("latex free", "door anchor", "exercise guide",
                                    "home workout"),
     (("pack", ("3 pack", "5 pack", "11 pack")),), (8.0, 35.0)),
    ("dumbbell set", "sports", ("neoprene coated", "hex shape", "home workout", "anti roll"),
     (("size", ("2 pound pair", "5 pound pair", "8 pound pair", "10 pound pair",
                "15 pound pair", "20 pound pair")),), (12.0, 110.0)),
    ("camping tent", "sports", ("waterproof", "easy setup", "rainfly", "family size"),
     (("color", COLORS[:10]), ("size", ("2 person", "4 person", "6 person", "8 person"))),
     (40.0, 260.0)),
    ("hiking backpack", "sports", ("waterproof", "rain cover", "padded straps",
                                   "hydration compatible"),
     (("color", COLORS[:10]), ("size", ("20l", "30l", "40l", "50l", "65l"))), (25.0, 120.0)),
    ("jump rope", "sports", ("tangle free", "ball bearings", "foam handles", "speed rope"),
     (("color", COLORS[:10]),), (6.0, 25.0)),
    ("dry dog food", "pets", ("high protein", "real meat", "puppy formula", "senior formula"),
     (("flavor", ("chicken", "beef", "salmon", "lamb", "turkey", "duck")),
      ("size", ("4 pound", "5 pound", "15 pound", "24 pound", "30 pound"))), (12.0, 80.0)),
    ("cat litter", "pets", ("clumping", "odor control", "low dust", "multi cat"),
     (("scent", SCENTS[:6]), ("size", ("10 pound", "20 pound", "28 pound", "40 pound"))),
     (8.0, 40.0)),
    ("dog bed", "pets", ("orthopedic", "washable cover", "bolster", "calming"),
     (("color", COLORS[:10]), ("size", PET_SIZES)), (20.0, 110.0)),
    ("cat toy", "pets", ("interactive", "catnip", "feather", "indoor cats"),
     (("pack", ("3 pack", "5 pack", "10 pack", "24 pack")),), (5.0, 25.0)),
    ("dog leash", "pets", ("reflective", "padded handle", "heavy duty", "hands free"),
     (("color", COLORS[:10]), ("size", ("4 feet", "5 feet", "6 feet", "10 feet"))), (7.0, 35.0)),
    ("pet shampoo", "pets", ("oatmeal", "itch relief", "tearless", "deodorizing"),
     (("scent", SCENTS), ("size", FLUID_SIZES[4:])), (6.0, 28.0)),
    ("building blocks", "toys", ("compatible with major brands", "storage box", "creative play",
                                 "city theme"),
     (("size", PIECES),), (12.0, 90.0)),
    ("jigsaw puzzle", "toys", ("for adults", "family game", "thick pieces", "poster included"),
     (("size", PIECES), ("style", ("landscape", "animals", "cityscape", "abstract", "floral"))),
     (8.0, 35.0)),
    ("plush toy", "toys", ("super soft", "stuffed animal", "washable", "cuddly"),
     (("color", COLORS[:12]), ("size", ("8 inch", "12 inch", "16 inch", "24 inch"))),
     (8.0, 45.0)),
    ("remote control car", "toys", ("rechargeable battery", "all terrain", "high speed",
                                    "led lights"),
     (("color", COLORS[:8]), ("style", ("monster truck", "race car", "off road", "drift car"))),
     (20.0, 120.0)),
    ("board game", "toys", ("family game", "strategy game", "2 to 6 players", "party game"),
     (("style", ("classic edition", "travel edition", "deluxe edition", "junior edition")),),
     (10.0, 60.0)),
    ("kids art set", "toys", ("washable", "crayons", "colored pencils", "carry case"),
     (("size", ("24 count", "48 count", "64 count", "96 count", "150 count")),), (8.0, 45.0)),
    ("gel pens", "office", ("smooth writing", "quick drying", "fine point", "retractable"),
     (("color", ("black ink", "blue ink", "red ink", "assorted colors", "pastel colors")),
      ("size", ("6 count", "12 count", "24 count", "36 count"))), (5.0, 28.0)),
    ("spiral notebook", "office", ("college ruled", "wide ruled", "perforated pages",
                                   "thick paper"),
     (("size", ("a5", "b5", "letter size", "pocket size")), ("pack", PACKS[:6])), (4.0, 30.0)),
    ("desk organizer", "office", ("mesh", "multiple compartments", "drawer", "space saving"),
     (("color", COLORS[:8]),), (10.0, 45.0)),
    ("sticky notes", "office", ("super sticky", "lined", "bright colors", "self stick"),
     (("size", ("1.5x2 inch", "3x3 inch", "3x5 inch", "4x6 inch")), ("pack", PACKS[2:7])),
     (4.0, 25.0)),
    ("stapler", "office", ("jam free", "desktop", "20 sheet capacity", "staples included"),
     (("color", COLORS[:8]),), (6.0, 35.0)),
    ("office chair", "office", ("ergonomic", "lumbar support", "adjustable height",
                                "swivel", "mesh back"),
     (("color", COLORS[:8]),), (60.0, 300.0)),
    ("vitamin d3 supplement", "health", ("5000 iu", "softgels", "bone health", "high potency"),
     (("size", COUNTS),), (6.0, 35.0)),
    ("fish oil", "health", ("omega 3", "softgels", "burpless", "heart health"),
     (("size", COUNTS),), (9.0, 45.0)),
    ("electric toothbrush", "health", ("rechargeable", "sonic", "travel case",
                                       "replacement heads"),
     (("color", COLORS[:8]),), (18.0, 120.0)),
    ("first aid kit", "health", ("compact", "emergency", "waterproof case", "travel"),
     (("size", PIECES[:4]),), (10.0, 55.0)),
    ("hand sanitizer", "health", ("kills 99.9% germs", "moisturizing", "aloe vera",
                                  "travel size"),
     (("scent", SCENTS[:8]), ("size", FLUID_SIZES[:7])), (3.0, 30.0)),
    ("disposable face masks", "health", ("3 ply", "breathable", "adjustable nose clip",
                                         "individually wrapped"),
     (("color", COLORS[:8]), ("pack", ("10 count", "50 count", "100 count"))), (6.0, 30.0)),
)


def _pool(name: str, own: tuple[str, ...], shared: tuple[str, ...]) -> tuple[str, ...]:
    """Own then shared attributes, without those the type's name already says ("wireless"
    for wireless earbuds): a product's title names its type, and that must not read as an
    attribute the product lacks."""
    merged = own + tuple(a for a in shared if a not in own)
    return tuple(a for a in merged if f" {a} " not in f" {name} ")


PRODUCT_TYPES: tuple[ProductType, ...] = tuple(
    ProductType(name, category, _pool(name, own, _CATEGORY_ATTRIBUTES[category]), options,
                price)
    for name, category, own, options, price in _TYPES
)
CATEGORIES: tuple[str, ...] = tuple(_CATEGORY_ATTRIBUTES)

# Words a title may put before the type name, by category.
TITLE_WORDS = {
    "beauty": ("Luxe", "Pure", "Radiant", "Velvet", "Glow", "Silk", "Bloom", "Botanical"),
    "grocery": ("Artisan", "Harvest", "Golden", "Farmhouse", "Classic", "Gourmet", "Simple"),
    "fashion": ("Casual", "Classic", "Everyday", "Vintage", "Modern", "Essential", "Urban"),
    "shoes": ("Comfort", "Trail", "Classic", "Urban", "Everyday", "Active", "Cloud"),
    "electronics": ("Pro", "Ultra", "Max", "Smart", "Mini", "Turbo", "Elite"),
    "home": ("Cozy", "Modern", "Rustic", "Luxury", "Boho", "Classic", "Nordic"),
    "kitchen": ("Chef", "Pro", "Everyday", "Premium", "Classic", "Smart", "Essential"),
    "sports": ("Pro", "Active", "Trail", "Summit", "Peak", "Core", "Endurance"),
    "pets": ("Happy", "Healthy", "Natural", "Premium", "Cozy", "Playful", "Loyal"),
    "toys": ("Fun", "Magic", "Little", "Bright", "Super", "Happy", "Creative"),
    "office": ("Smart", "Classic", "Pro", "Essential", "Daily", "Premium", "Studio"),
    "health": ("Daily", "Pure", "Vital", "Natural", "Essential", "Advanced", "Simple"),
}

# What a description says a product is for, by category.
USES = {
    "beauty": ("daily skin care", "a natural look", "all skin types", "travel and gym bags"),
    "grocery": ("healthy snacking", "the whole family", "busy mornings", "parties and gifts"),
    "fashion": ("everyday outfits", "work and weekends", "casual outings", "all seasons"),
    "shoes": ("walking and running", "all day comfort", "work and travel", "casual wear"),
    "electronics": ("home and office", "travel", "phones and tablets", "everyday use"),
    "home": ("cozy evenings", "family spaces", "guest rooms", "a cozy home"),
    "kitchen": ("everyday cooking", "meal prep", "the office", "home chefs"),
    "sports": ("workouts at home", "camping and hiking", "the gym", "outdoor adventures"),
    "pets": ("dogs and cats", "happy pets", "daily care", "pets of all ages"),
    "toys": ("boys and girls", "game nights with family", "birthday gifts",
             "learning through play"),
    "office": ("home office", "school", "students and teachers", "daily planning"),
    "health": ("daily wellness", "the whole family", "trips away from home", "everyday health"),
}

BENEFITS = ("made to last", "tested for quality", "loved by customers", "simple to use every day",
            "designed with care", "great value", "backed by our satisfaction promise")

BRAND_STARTS = ("Ver", "Lum", "Cor", "Bri", "Nov", "Zen", "Or", "Kel", "Mar", "Sol", "Tre",
                "Vi", "Ald", "Bel", "Cal", "Dro", "El", "Fen", "Gal", "Hal", "Jun", "Kor",
                "Lin", "Mel", "Nor", "Pel", "Quin", "Ros", "Sev", "Tal", "Ul", "Wyn", "Yar")
BRAND_ENDS = ("ora", "ex", "ly", "ent", "ix", "ano", "ella", "ton", "ique", "on", "us", "ara",
              "ind", "era", "ova", "eon", "ia", "is", "ado", "ette")
