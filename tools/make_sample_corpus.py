"""Generate the bundled sample corpus that every attnwh command reads by default offline.

It writes two small labelled tasks, made from templates and vocabulary written for
this project (no text comes from an existing dataset):

* ``sentiment/{train,dev}.tsv``: one sentence per row with a binary label, like SST-2.
  Header ``sentence<TAB>label``; label ``1`` is positive, ``0`` negative.  Reviews of
  films, books, restaurants, gadgets, trips, music and games, in many shapes: fragments,
  sentences with commas, "but"/"although" contrasts where the final clause decides,
  negation ("not bad at all", "hardly worth it"), exclamations, quotes, parentheses and
  numbers.
* ``entailment/{train,dev}.tsv``: sentence pairs, like RTE.  Header
  ``index<TAB>sentence1<TAB>sentence2<TAB>label``; label ``entailment`` or
  ``not_entailment``.  Entailment comes from hypernyms, dropped modifiers, verb
  paraphrases, passives, converse relations, conjunction elimination and number bounds;
  non-entailment from antonyms, negation, swapped roles, sibling nouns, changed places,
  times or numbers, added details and unrelated claims, mixed so that no single surface
  cue (such as the word "not") decides the label.

Each task has TRAIN_SIZE train and DEV_SIZE dev rows with exactly balanced labels; no
row repeats within or across the splits.  The output depends only on the seed, so the
files are byte-identical from run to run.  Standard library only.

Rerun from the repository root with::

    python tools/make_sample_corpus.py                # writes ingest/sources/sample/
    python tools/make_sample_corpus.py --out DIR      # writes DIR/sentiment, DIR/entailment
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, replace
from pathlib import Path

SEED = 20240611
TRAIN_SIZE = 2000
DEV_SIZE = 400
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "ingest" / "sources" / "sample"

MIN_WORDS = 4
MAX_WORDS = 40


# --------------------------------------------------------------------------- helpers


def article(phrase: str) -> str:
    """`phrase` with "a" or "an" in front."""
    low = phrase.lower()
    if low.startswith(("hour", "honest", "heir")):
        return "an " + phrase
    if low.startswith(("uni", "use", "eu", "one", "uk")):
        return "a " + phrase
    return ("an " if low[0] in "aeiou" else "a ") + phrase


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_word(n: int) -> str:
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + ("" if ones == 0 else "-" + _ONES[ones])


def number_text(rng: random.Random, n: int) -> str:
    """A count as words or digits, as people write them."""
    if n >= 100:
        return f"{n:,}"
    if n <= 12 or n % 10 == 0:
        return number_word(n)
    return number_word(n) if rng.random() < 0.35 else str(n)


def join_words(*parts: str) -> str:
    return " ".join(p for p in parts if p)


# ======================================================================= sentiment


@dataclass(frozen=True)
class AspectGroup:
    aspects: tuple[str, ...]
    pos: tuple[str, ...]
    neg: tuple[str, ...]


@dataclass(frozen=True)
class Domain:
    name: str
    items: tuple[str, ...]
    prep: str  # "the pacing IN this thriller", "the service AT this bistro"
    groups: tuple[AspectGroup, ...]
    item_pos: tuple[str, ...]  # adjectives that fit the item as a whole
    item_neg: tuple[str, ...]
    vp_pos: tuple[str, ...]  # predicates with the item as subject
    vp_neg: tuple[str, ...]
    titles: tuple[str, ...]
    quote_titles: bool
    base: str  # "watch": do yourself a favour and watch this film
    past: str  # "watched"
    intros: tuple[str, ...]  # neutral opening sentences
    single_pos: str  # "there was not a single dull moment"
    single_neg: str  # "there was not a single memorable scene"
    never_pos: tuple[str, ...]  # "I never once checked my watch"
    tail_pos: tuple[str, ...]
    tail_neg: tuple[str, ...]
    units: tuple[str, ...] = ("weeks", "months")


def G(aspects: str, pos: str, neg: str) -> AspectGroup:
    return AspectGroup(
        tuple(a.strip() for a in aspects.split(",")),
        tuple(a.strip() for a in pos.split(",")),
        tuple(a.strip() for a in neg.split(",")),
    )


def T(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split("|"))


DOMAINS: tuple[Domain, ...] = (
    Domain(
        name="film",
        items=T(
            "film|movie|thriller|comedy|documentary|sequel|drama|animated feature|horror movie|"
            "biopic|western|musical|war film|romantic comedy|heist movie"
        ),
        prep="in",
        groups=(
            G(
                "plot, script, story, ending, final act, dialogue, premise, twist",
                "gripping, clever, witty, moving, original, tight, surprising, heartfelt",
                "predictable, clumsy, confusing, silly, tired, muddled, lazy, contrived",
            ),
            G(
                "acting, lead performance, cast, villain, supporting cast, young lead",
                "superb, magnetic, natural, convincing, fearless, charming",
                "wooden, stiff, hammy, lifeless, unconvincing, forgettable",
            ),
            G(
                "cinematography, soundtrack, score, costume design, production design, camerawork",
                "gorgeous, stunning, haunting, lush, inventive, striking",
                "cheap, overbearing, ugly, drab, intrusive, generic",
            ),
            G(
                "pacing, editing, running time",
                "brisk, confident, well judged, tight",
                "sluggish, glacial, choppy, uneven, bloated",
            ),
        ),
        item_pos=T("gripping|moving|hilarious|charming|haunting|clever|heartwarming|thrilling|beautiful|smart"),
        item_neg=T("dull|tedious|bloated|forgettable|predictable|cheesy|pretentious|joyless|boring|messy"),
        vp_pos=T(
            "kept me on the edge of my seat|had the whole theater laughing|left me in tears, the good kind|"
            "stayed with me for days|earned every minute of its running time|won me over within ten minutes|"
            "deserves every award it gets|is the best thing I have seen this year"
        ),
        vp_neg=T(
            "dragged on forever|put half the audience to sleep|fell apart in the final act|"
            "felt twice as long as it was|wasted a talented cast|had people walking out halfway through|"
            "is the worst thing I have seen this year"
        ),
        titles=T(
            "The Glass Orchard|Midnight on Harrow Lane|Salt and Thunder|The Last Lighthouse Keeper|Paper Wolves|"
            "A Summer Without Clocks|Northbound|Small Hours|The Velvet Engine|Kestrel Bay"
        ),
        quote_titles=True,
        base="watch",
        past="watched",
        intros=T(
            "We caught the late showing on a Thursday.|I watched it on a long flight.|"
            "My sister picked it for movie night.|I saw it at a small festival last spring.|"
            "We streamed it on a rainy Sunday.|I went to the premiere with two friends."
        ),
        single_pos="dull moment",
        single_neg="memorable scene",
        never_pos=T("never once checked my watch|never reached for my phone"),
        tail_pos=T("Go see it.|Ten out of ten.|Bring tissues.|I want to see it again."),
        tail_neg=T("Skip it.|Wait for it to hit streaming, or don't.|I want my two hours back."),
        units=T("minutes|weeks"),
    ),
    Domain(
        name="book",
        items=T(
            "novel|memoir|cookbook|short story collection|biography|mystery|fantasy novel|"
            "poetry collection|travel guide|graphic novel|debut novel|thriller|history book"
        ),
        prep="in",
        groups=(
            G(
                "prose, writing, dialogue, translation, narration, style",
                "lyrical, elegant, vivid, crisp, witty, precise",
                "clunky, overwritten, flat, stilted, purple, repetitive",
            ),
            G(
                "plot, ending, story, mystery, premise, opening chapter, final chapter",
                "gripping, clever, absorbing, surprising, satisfying, tense",
                "predictable, thin, muddled, rushed, tedious, far-fetched",
            ),
            G(
                "main character, narrator, heroine, villain, supporting cast, love interest",
                "vivid, believable, complex, memorable, lovable",
                "shallow, flat, annoying, unbelievable, forgettable",
            ),
            G(
                "research, artwork, cover design, index, footnote work",
                "meticulous, thorough, gorgeous, lovely, impressive",
                "sloppy, thin, careless, lazy, confusing",
            ),
        ),
        item_pos=T("gripping|wise|moving|absorbing|funny|beautiful|brilliant|tender|unforgettable|smart"),
        item_neg=T("dull|tedious|shallow|bloated|forgettable|predictable|preachy|lifeless|confusing|boring"),
        vp_pos=T(
            "was impossible to put down|kept me reading until three in the morning|"
            "made me laugh out loud on the bus|"
            "taught me more than I expected|is already on my list of favorites|"
            "deserves a much wider audience"
        ),
        vp_neg=T(
            "put me to sleep every night|lost me by chapter three|was a slog to get through|"
            "read like a first draft|went straight to the charity shop|"
            "could have been half as long"
        ),
        titles=T(
            "The Salt Road|Letters from Windmere|A Map of Small Mercies|The Clockmaker's Apprentice|"
            "Winter Figs|Ninety Days in Tbilisi|The Lantern Keepers|Bread and Weather|Quiet Harbor|The Paper Fox"
        ),
        quote_titles=True,
        base="read",
        past="read",
        intros=T(
            "I picked this up at an airport bookshop.|A friend lent me her copy.|"
            "I read it over a long weekend.|Our book club chose it for March.|"
            "I bought the paperback on a whim.|I listened to the audiobook on my commute."
        ),
        single_pos="wasted page",
        single_neg="likable character",
        never_pos=T("never once skimmed a page|never wanted it to end"),
        tail_pos=T("Read it.|Five stars.|Already buying copies for friends.|A new favorite."),
        tail_neg=T("Skip it.|Two stars, and that is generous.|Back to the library it goes."),
        units=T("pages|days"),
    ),
    Domain(
        name="restaurant",
        items=T(
            "restaurant|bistro|diner|food truck|pizzeria|noodle bar|bakery|café|steakhouse|"
            "sushi place|taco stand|brunch spot|tapas bar|curry house|seafood shack"
        ),
        prep="at",
        groups=(
            G(
                "soup, curry, steak, pasta, dessert, bread, pizza, ramen, seafood platter, crème brûlée, "
                "house salad, burger, risotto, jalapeño salsa, roast chicken",
                "delicious, fresh, flavorful, perfectly seasoned, mouth-watering, rich, superb",
                "bland, greasy, lukewarm, oversalted, tasteless, stodgy, overcooked",
            ),
            G(
                "service, staff, waiter, waitress, host, bartender",
                "attentive, friendly, warm, quick, gracious, welcoming",
                "rude, slow, careless, dismissive, sloppy, indifferent",
            ),
            G(
                "atmosphere, decor, dining room, terrace, interior, music",
                "cozy, charming, relaxed, elegant, inviting, lovely",
                "cramped, noisy, dingy, drafty, gloomy, depressing",
            ),
            G(
                "coffee, wine list, espresso, lemonade, cocktail menu, house wine",
                "excellent, superb, fresh, interesting, well chosen",
                "bitter, watery, overpriced, limited, disappointing",
            ),
            G("portion size, price, bill", "generous, fair, reasonable", "stingy, outrageous, absurd"),
        ),
        item_pos=T("delicious|charming|wonderful|cozy|friendly|excellent|lovely|fantastic|welcoming|superb"),
        item_neg=T("overpriced|disappointing|dirty|chaotic|awful|mediocre|depressing|forgettable|filthy|miserable"),
        vp_pos=T(
            "served the best soup in town|made us feel like regulars|"
            "had us planning our next visit before dessert arrived|is worth the drive across town|"
            "gets everything right|never lets us down"
        ),
        vp_neg=T(
            "made us wait an hour for cold food|got every order wrong|"
            "charged us a fortune for tiny portions|gave my brother food poisoning|"
            "forgot our table twice|ruined my birthday dinner"
        ),
        titles=T(
            "The Copper Pot|Luigi's|Blue Fern Kitchen|Casa Lupita|The Hungry Heron|Mama Rosa's|"
            "Noodle Republic|Le Petit Zinc|The Saffron Door|Harbor & Vine"
        ),
        quote_titles=False,
        base="try",
        past="tried",
        intros=T(
            "We booked a table for six on a Friday night.|We stopped in for a late lunch.|"
            "A coworker recommended it.|We came here for my mother's birthday.|"
            "We walked in without a reservation.|I ordered takeout on a Tuesday."
        ),
        single_pos="bad dish",
        single_neg="decent dish",
        never_pos=T("never waited more than five minutes|never had a bad meal here"),
        tail_pos=T("We'll be back.|Book ahead.|Worth every cent.|Highly recommended."),
        tail_neg=T("We won't be back.|Avoid.|Eat anywhere else.|Never again."),
        units=T("visits|minutes"),
    ),
    Domain(
        name="gadget",
        items=T(
            "phone|laptop|smartwatch|tablet|e-reader|camera|drone|fitness tracker|handheld console|"
            "smartphone|notebook computer|action camera|baby monitor|dashcam"
        ),
        prep="on",
        groups=(
            G(
                "battery, battery life, charger, charging speed",
                "excellent, reliable, long-lasting, impressive, outstanding",
                "weak, pathetic, unreliable, disappointing, miserable",
            ),
            G(
                "screen, display, speaker, sound, camera, microphone",
                "crisp, bright, clear, rich, sharp, vivid",
                "dim, tinny, grainy, muddy, washed-out, fuzzy",
            ),
            G(
                "build quality, hinge, casing, power button, strap, lid",
                "sturdy, solid, sleek, premium, durable",
                "flimsy, cheap, wobbly, fragile, creaky",
            ),
            G(
                "software, app, setup, interface, update process, menu system",
                "intuitive, fast, smooth, simple, responsive, painless",
                "buggy, sluggish, confusing, laggy, clunky, infuriating",
            ),
            G("fan, motor", "quiet, whisper-quiet, efficient, powerful", "noisy, deafening, whiny, feeble"),
        ),
        item_pos=T("reliable|fantastic|sleek|excellent|sturdy|brilliant|handy|superb|dependable|impressive"),
        item_neg=T("flimsy|useless|unreliable|awful|overpriced|frustrating|clunky|disappointing|fragile|terrible"),
        vp_pos=T(
            "works exactly as advertised|has not crashed once|lasts two full days on a charge|"
            "replaced three older devices on my desk|survived a fall down the stairs|"
            "feels built to last"
        ),
        vp_neg=T(
            "stopped working after two weeks|overheats constantly|crashes every time I open the app|"
            "died the day after the warranty ran out|broke within a month|"
            "froze during my sister's wedding"
        ),
        titles=T("Zephyr X2|Photon 3000|Orbit Mini|Nimbus Pro 14|PulseBand 5|Lumen S7|Vortex 900|Echo Slate 10"),
        quote_titles=False,
        base="buy",
        past="bought",
        intros=T(
            "I ordered it after my old one died.|My partner gave it to me for my birthday.|"
            "I bought it on sale last spring.|I have used it every day since March.|"
            "I picked the cheaper model to save money.|It arrived two days early."
        ),
        single_pos="crash in six months",
        single_neg="redeeming feature",
        never_pos=T("never had to restart it|never regretted the price"),
        tail_pos=T("Buy it.|Worth every cent.|Five stars.|No regrets."),
        tail_neg=T("Returned it.|Save your money.|One star.|Avoid this model."),
        units=T("weeks|months|days"),
    ),
    Domain(
        name="trip",
        items=T(
            "trip|tour|cruise|hotel|hostel|road trip|hike|weekend getaway|guided tour|resort|"
            "train journey|camping trip|ski holiday|boat tour|bed and breakfast"
        ),
        prep="on",
        groups=(
            G(
                "room, bed, bathroom, cabin, campsite, suite",
                "spotless, comfortable, spacious, cozy, quiet",
                "cramped, dirty, damp, shabby, noisy, musty",
            ),
            G(
                "guide, staff, host, driver, crew, receptionist",
                "friendly, knowledgeable, helpful, patient, funny",
                "rude, unhelpful, grumpy, clueless, careless",
            ),
            G(
                "view, beach, scenery, old town, coastline, trail, lake",
                "breathtaking, stunning, peaceful, gorgeous, unspoiled",
                "disappointing, overcrowded, polluted, dreary, littered",
            ),
            G(
                "itinerary, schedule, check-in, airport transfer, booking process, bus",
                "smooth, well organized, relaxed, efficient, flexible",
                "chaotic, exhausting, disorganized, rushed, endless",
            ),
            G(
                "breakfast, buffet, food, picnic lunch",
                "delicious, fresh, generous, varied",
                "bland, stale, greasy, repetitive",
            ),
        ),
        item_pos=T("relaxing|unforgettable|magical|wonderful|peaceful|fantastic|charming|lovely|perfect|restful"),
        item_neg=T("exhausting|miserable|chaotic|overpriced|disappointing|stressful|awful|dreary|tiring|dreadful"),
        vp_pos=T(
            "was the highlight of our year|ran like clockwork|left us relaxed and happy|"
            "showed us places we would never have found alone|was worth every cent we saved for it|"
            "made our anniversary unforgettable"
        ),
        vp_neg=T(
            "was a disaster from start to finish|left us exhausted and broke|"
            "felt like one long queue|ruined our anniversary|was cancelled twice without warning|"
            "left us stranded at the station"
        ),
        titles=T(
            "Hotel Miramar|the Alpine Express|Villa Serena|the Blue Lagoon Lodge|Camp Redwood|the Aurora Line|"
            "Pension Sonnenhof|the Kraków Old Town tour|the Malmö harbor cruise"
        ),
        quote_titles=False,
        base="book",
        past="booked",
        intros=T(
            "We booked it three months in advance.|We went in the middle of August.|"
            "It was our first holiday in years.|We traveled with two teenagers.|"
            "I went alone after a long winter.|We stayed for four nights."
        ),
        single_pos="dull day",
        single_neg="relaxing hour",
        never_pos=T("never once felt rushed|never wanted to leave"),
        tail_pos=T("Would go again.|Book it.|Already planning our return.|Pure bliss."),
        tail_neg=T("Never again.|Stay home instead.|What a waste of a holiday.|Avoid."),
        units=T("days|nights|hours"),
    ),
    Domain(
        name="music",
        items=T("album|concert|single|live show|EP|band|opera|debut album|gig|record|festival set"),
        prep="on",
        groups=(
            G(
                "vocal performance, voice, singing, lead vocal, harmony work",
                "soaring, soulful, gorgeous, powerful, tender",
                "shrill, flat, strained, thin, off-key",
            ),
            G(
                "songwriting, chorus, melody, title track, opening song, closing ballad",
                "catchy, clever, gorgeous, heartfelt, infectious",
                "forgettable, clumsy, repetitive, cheesy, tuneless",
            ),
            G(
                "production, sound mix, recording, audio, mastering",
                "crisp, warm, rich, clean, punchy",
                "muddy, harsh, thin, flat, cluttered",
            ),
            G(
                "drummer, guitarist, setlist, encore, light show, opening act, rhythm section",
                "tight, energetic, electric, brilliant, generous",
                "sloppy, lazy, lifeless, disappointing, tired",
            ),
        ),
        item_pos=T("gorgeous|catchy|thrilling|beautiful|joyful|electric|stunning|uplifting|brilliant|fresh"),
        item_neg=T("forgettable|bland|lifeless|tedious|grating|sloppy|boring|disappointing|tired|shrill"),
        vp_pos=T(
            "gave me chills|has been on repeat all week|got the whole crowd dancing|"
            "sounds better with every listen|made the long drive fly by|was worth the long queue"
        ),
        vp_neg=T(
            "made me reach for the skip button|sounded like a rehearsal|emptied the room by the third song|"
            "gets worse with every listen|was drowned out by the chatter|started an hour late and ended early"
        ),
        titles=T(
            "Neon Harvest|Quiet Engines|Saltwater Hymns|Low Tide Radio|The Long Way Round|Copper Skies|"
            "Night Trains|Glass Animals in Winter"
        ),
        quote_titles=True,
        base="hear",
        past="heard",
        intros=T(
            "I streamed it on my commute all week.|We saw them at a small club downtown.|"
            "A friend sent me the first track.|I bought the vinyl the day it came out.|"
            "We had tickets in the back row.|I played it at a dinner party."
        ),
        single_pos="weak track",
        single_neg="catchy song",
        never_pos=T("never skipped a single song|never stopped dancing"),
        tail_pos=T("Turn it up.|Essential listening.|Five stars.|On repeat."),
        tail_neg=T("Pass.|Not for me, or anyone.|One star.|Skip it."),
        units=T("songs|minutes|weeks"),
    ),
    Domain(
        name="game",
        items=T(
            "video game|puzzle game|strategy game|racing game|role-playing game|platformer|"
            "mobile game|co-op game|farming sim|shooter|indie game|survival game"
        ),
        prep="in",
        groups=(
            G(
                "control scheme, camera system, aiming, handling, input response",
                "responsive, tight, smooth, precise, intuitive",
                "clunky, sluggish, floaty, awkward, unresponsive",
            ),
            G(
                "artwork, art style, animation, world, character design",
                "gorgeous, charming, stunning, vibrant, detailed",
                "ugly, bland, muddy, dated, lifeless",
            ),
            G(
                "level design, difficulty curve, story, campaign, rulebook, tutorial, multiplayer mode, ending",
                "clever, rewarding, fair, deep, satisfying, well paced",
                "unfair, tedious, shallow, confusing, repetitive, punishing",
            ),
            G(
                "frame rate, online mode, loading time, save system, performance",
                "smooth, stable, rock-solid, quick",
                "choppy, unstable, broken, glacial, buggy",
            ),
        ),
        item_pos=T("addictive|charming|clever|polished|rewarding|delightful|brilliant|gorgeous|fun|smart"),
        item_neg=T("tedious|broken|shallow|boring|frustrating|buggy|repetitive|joyless|clunky|pointless"),
        vp_pos=T(
            "ate my entire weekend in the best way|kept our group laughing all night|"
            "rewards every hour you put in|became our new game night favorite|"
            "has hundreds of hours of content"
        ),
        vp_neg=T(
            "crashed every twenty minutes|felt like a chore after the first hour|ended our game night early|"
            "locks half its content behind a paywall|lost my save file twice"
        ),
        titles=T(
            "Starfall Tactics|Moss & Mortar|Harbor Kings|Tiny Lanterns|Rust Circuit|The Ninth Orchard|"
            "Skyward Couriers|Dungeon Bakery"
        ),
        quote_titles=True,
        base="play",
        past="played",
        intros=T(
            "We tried it at a friend's birthday party.|I played it over the winter break.|"
            "It was on sale for half price.|My kids begged me to buy it.|"
            "Our group plays every Thursday.|I finished the campaign in a week."
        ),
        single_pos="boring level",
        single_neg="fun level",
        never_pos=T("never got bored|never wanted to put the controller down"),
        tail_pos=T("Play it.|Instant classic.|Nine out of ten.|Worth full price."),
        tail_neg=T("Uninstalled.|Skip it.|Refund requested.|Three out of ten."),
        units=T("hours|levels|weeks"),
    ),
)

GENERIC_POS = T(
    "excellent|superb|wonderful|fantastic|terrific|outstanding|impressive|first-rate|lovely|"
    "great|marvelous|exceptional|top-notch|brilliant"
)
GENERIC_NEG = T(
    "terrible|awful|dreadful|disappointing|mediocre|poor|lousy|abysmal|atrocious|dismal|"
    "subpar|underwhelming|shoddy|woeful"
)
GENERIC_VP_POS = T(
    "exceeded all my expectations|was worth every penny|was an absolute joy|was a real treat|"
    "won me over completely|was far better than I expected|made my week|"
    "delivered on every promise|put a smile on my face"
)
GENERIC_VP_NEG = T(
    "was a complete waste of money|was a huge letdown|fell flat|was a total disappointment|"
    "was worse than I expected|ruined my weekend|failed on almost every level|"
    "was a chore from start to finish|left me cold"
)
INTENS_ANY = T(
    "really|truly|genuinely|incredibly|remarkably|surprisingly|utterly|quite|pretty|so|"
    "consistently|thoroughly|absolutely"
)
INTENS_POS = T("wonderfully|beautifully|delightfully")
INTENS_NEG = T("painfully|embarrassingly|hopelessly|frustratingly")
OPENERS = T(
    "Honestly|Frankly|Overall|In short|All things considered|For what it's worth|Simply put|"
    "To be honest|In the end|Without a doubt|Believe me|As it turns out"
)
GENERIC_INTROS = T(
    "I had heard mixed things.|I went in knowing nothing about it.|"
    "My expectations were modest.|Everyone at work was talking about it.|"
    "I finally gave it a chance.|This was my second try.|It took me a while to get to it."
)
LOVE = T("loved|adored|enjoyed|admired|treasured|appreciated|relished")
HATE = T("hated|loathed|disliked|resented|regretted|could not stand|got tired of")
FRIENDS = (
    ("sister", "she"),
    ("brother", "he"),
    ("neighbor", "she"),
    ("dad", "he"),
    ("mom", "she"),
    ("roommate", "he"),
    ("coworker", "she"),
    ("uncle", "he"),
    ("best friend", "she"),
    ("boss", "he"),
)
QUOTE_POS = T("a masterpiece|pure magic|unmissable|the best in town|life-changing|a triumph|a gem|flawless")
QUOTE_NEG = T("a disaster|a waste of time|a total mess|unbearable|a rip-off|painfully bad|a train wreck|a flop")
WHO_QUOTES = T("the critic|the review in the paper|the poster|the blurb on the box|my local paper|the ad")
POSSESSIVE = {
    "film": "the new",
    "book": "the new",
    "gadget": "my",
    "trip": "our",
    "music": "their new",
    "game": "the new",
    "restaurant": "the new",
}
FEW = (1, 2, 3)
MANY = (8, 9, 10)


@dataclass
class SentimentMaker:
    rng: random.Random
    item: str = ""  # the one item (and title) a text talks about
    title: str = ""

    # ---- small pickers
    def domain(self) -> Domain:
        return self.rng.choice(DOMAINS)

    def group(self, d: Domain) -> AspectGroup:
        return self.rng.choice(d.groups)

    def aspect_adj(self, d: Domain, pol: int, grp: AspectGroup | None = None) -> tuple[str, str]:
        grp = grp or self.group(d)
        aspect = self.rng.choice(grp.aspects)
        pool = grp.pos if pol else grp.neg
        if self.rng.random() < 0.25:
            pool = GENERIC_POS if pol else GENERIC_NEG
        return aspect, self.rng.choice(pool)

    def item_adj(self, d: Domain, pol: int) -> str:
        if self.rng.random() < 0.3:
            return self.rng.choice(GENERIC_POS if pol else GENERIC_NEG)
        return self.rng.choice(d.item_pos if pol else d.item_neg)

    def intens(self, pol: int) -> str:
        r = self.rng.random()
        if r < 0.45:
            return ""
        if r < 0.85:
            return self.rng.choice(INTENS_ANY) + " "
        return self.rng.choice(INTENS_POS if pol else INTENS_NEG) + " "

    def vp(self, d: Domain, pol: int) -> str:
        if self.rng.random() < 0.35:
            return self.rng.choice(GENERIC_VP_POS if pol else GENERIC_VP_NEG)
        return self.rng.choice(d.vp_pos if pol else d.vp_neg)

    def subject(self, d: Domain, start: bool = True) -> str:
        """The item as a noun phrase; quoted titles only away from the sentence start."""
        r = self.rng.random()
        item = self.item
        if r < 0.35:
            return "the " + item
        if r < 0.6:
            return "this " + item
        if r < 0.72 and d.name in POSSESSIVE:
            return POSSESSIVE[d.name] + " " + item
        if r < 0.82:
            return "the " + item
        title = self.title
        if d.quote_titles:
            if start:
                return "this " + item
            return f'"{title}"'
        if d.name == "gadget":
            return "the " + title
        return title

    def the_aspect(self, d: Domain, aspect: str) -> str:
        r = self.rng.random()
        if r < 0.7:
            return "the " + aspect
        return f"the {aspect} {d.prep} this {self.item}"

    # ---- clauses (lower case, no final punctuation)
    def clause(self, d: Domain, pol: int) -> str:
        r = self.rng.random()
        if r < 0.45:
            aspect, adj = self.aspect_adj(d, pol)
            return f"{self.the_aspect(d, aspect)} was {self.intens(pol)}{adj}"
        if r < 0.7:
            return f"{self.subject(d, start=False)} {self.vp(d, pol)}"
        if r < 0.85:
            aspect, _ = self.aspect_adj(d, pol)
            return f"I {self.rng.choice(LOVE if pol else HATE)} the {aspect}"
        return f"{self.subject(d, start=False)} was {self.intens(pol)}{self.item_adj(d, pol)}"

    def neg_clause(self, d: Domain, pol: int) -> str:
        """A clause whose polarity comes through a negation."""
        rng = self.rng
        grp = self.group(d)
        aspect = rng.choice(grp.aspects)
        the_a = self.the_aspect(d, aspect)
        s = self.subject(d, start=False)
        if pol:
            options = [
                f"{the_a} was not bad at all",
                f"{the_a} was far from {rng.choice(grp.neg)}",
                f"nothing about {the_a} felt {rng.choice(grp.neg)}",
                f"there was nothing {rng.choice(grp.neg)} about {the_a}",
                f"I have no complaints about {the_a}",
                f"I can't say enough good things about {the_a}",
                f"there was not a single {d.single_pos}",
                f"I {rng.choice(d.never_pos)}",
                f"{s} did not disappoint",
                f"{s} was never {rng.choice(('boring', 'dull', 'tedious', 'a letdown'))}",
                "I don't regret a single cent",
                f"{s} was not {rng.choice(('bad', 'boring', 'disappointing', 'overrated'))} in the slightest",
                "I could not have asked for more",
                f"{the_a} could not have been {rng.choice(('better', 'nicer', 'more perfect'))}",
            ]
        else:
            options = [
                f"{the_a} was not {rng.choice(grp.pos)}",
                f"{the_a} was not exactly {rng.choice(grp.pos)}",
                f"{the_a} was hardly {rng.choice(grp.pos)}",
                f"{the_a} was far from {rng.choice(grp.pos)}",
                f"nothing about {the_a} felt {rng.choice(grp.pos)}",
                f"there was nothing {rng.choice(grp.pos)} about {the_a}",
                f"I have nothing good to say about {the_a}",
                f"there was not a single {d.single_neg}",
                f"{s} did not live up to the hype",
                f"{s} was not worth the {rng.choice(('money', 'wait', 'hype', 'price'))}",
                f"I would not {d.base} it again",
                f"{s} never really comes together",
                f"{s} was not {rng.choice(('good', 'fun', 'great', 'worth it'))}, not even close",
                f"{the_a} could not have been {rng.choice(('worse', 'duller', 'more disappointing'))}",
            ]
        return rng.choice(options)

    def contrast_lead(self, d: Domain, pol: int) -> str:
        """A clause of polarity `pol` that the sentence then overrides."""
        if self.rng.random() < 0.2:
            return self.neg_clause(d, pol)
        return self.clause(d, pol)

    # ---- templates: each returns a full text for label `pol`
    def t_aspect(self, d: Domain, pol: int) -> str:
        rng = self.rng
        aspect, adj = self.aspect_adj(d, pol)
        forms = [
            f"The {aspect} was {self.intens(pol)}{adj}.",
            f"The {aspect} {d.prep} this {self.item} was {self.intens(pol)}{adj}.",
            f"I found the {aspect} {self.intens(pol)}{adj}.",
            f"The {aspect}? {cap(self.intens(pol) or 'just ')}{adj}.",
            f"{cap(self.intens(pol) or 'really ')}{adj} {aspect}, {self.item_adj(d, pol)} {self.item}.",
        ]
        return rng.choice(forms)

    def t_two_aspects(self, d: Domain, pol: int) -> str:
        rng = self.rng
        g1, g2 = rng.sample(d.groups, 2)
        a1, j1 = self.aspect_adj(d, pol, g1)
        a2, j2 = self.aspect_adj(d, pol, g2)
        a3, j3 = self.aspect_adj(d, pol)
        forms = [
            f"The {a1} was {j1}, and the {a2} was {self.intens(pol)}{j2}.",
            f"{cap(j1)} {a1}, {j2} {a2}, {j3} {a3}.",
            f"Both the {a1} and the {a2} were {self.intens(pol)}{j1}.",
            f"The {a1} was {j1}; the {a2}, even more so.",
            f"{cap(j1)} {a1} and {j2} {a2}: what more could you want?"
            if pol
            else f"{cap(j1)} {a1} and {j2} {a2}: what a letdown.",
        ]
        return rng.choice(forms)

    def t_vp(self, d: Domain, pol: int) -> str:
        rng = self.rng
        forms = [
            f"{cap(self.subject(d))} {self.vp(d, pol)}.",
            f"{rng.choice(OPENERS)}, {self.subject(d, start=False)} {self.vp(d, pol)}.",
            f"{cap(self.subject(d))} {self.vp(d, pol)}, and it was {self.item_adj(d, pol)} too.",
            f"{rng.choice(OPENERS)}, {self.clause(d, pol)}.",
        ]
        return rng.choice(forms)

    def t_but(self, d: Domain, pol: int) -> str:
        rng = self.rng
        lead = self.contrast_lead(d, 1 - pol)
        final = self.clause(d, pol) if rng.random() < 0.75 else self.neg_clause(d, pol)
        forms = [
            f"{cap(lead)}, but {final}.",
            f"Sure, {lead}, but {final}.",
            f"{cap(lead)}. Still, {final}.",
            f"{cap(lead)}. However, {final}.",
            f"{cap(lead)}, yet {final}.",
        ]
        if pol:
            forms.append(f"I expected very little, but {final}.")
        else:
            forms.append(f"I had high hopes, but {final}.")
        return rng.choice(forms)

    def t_although(self, d: Domain, pol: int) -> str:
        rng = self.rng
        lead = self.contrast_lead(d, 1 - pol)
        final = self.clause(d, pol) if rng.random() < 0.75 else self.neg_clause(d, pol)
        aspect, adj = self.aspect_adj(d, 1 - pol)
        conj = rng.choice(("Although", "Even though", "While", "Though"))
        forms = [
            f"{conj} {lead}, {final}.",
            f"Despite the {adj} {aspect}, {final}.",
            f"{conj} {lead}, I have to admit that {final}.",
        ]
        return rng.choice(forms)

    def t_negation(self, d: Domain, pol: int) -> str:
        rng = self.rng
        item = self.item
        forms = [
            f"{cap(self.neg_clause(d, pol))}.",
            f"{rng.choice(OPENERS)}, {self.neg_clause(d, pol)}.",
            f"{cap(self.neg_clause(d, pol))}, and {self.neg_clause(d, pol)}.",
        ]
        if pol:
            forms += [
                "Not bad at all, especially for the price.",
                "Never boring, never predictable, and never too long.",
                f"You won't regret giving this {item} a chance.",
                f"I don't usually like {item}s, but this one won me over.",
            ]
        else:
            forms += [
                "Not good, and not even bad in an interesting way.",
                f"Not once did this {item} surprise me.",
                f"I won't be giving this {item} a second chance.",
                f"I usually love {item}s, but this one did nothing for me.",
            ]
        return rng.choice(forms)

    def t_exclaim(self, d: Domain, pol: int) -> str:
        rng = self.rng
        item = self.item
        aspect, adj = self.aspect_adj(d, pol)
        forms = [
            f"What {article(self.item_adj(d, pol))} {item}!",
            f"Wow, the {aspect} was {self.intens(pol)}{adj}!",
            f"I {rng.choice(('loved', 'enjoyed', 'savored') if pol else ('hated', 'regretted', 'resented'))} "
            f"every minute of it!",
            f"{cap(self.subject(d))} {self.vp(d, pol)}!",
            f"{cap(self.intens(pol) or 'simply ')}{self.item_adj(d, pol)}, from start to finish!",
            f"{cap(self.clause(d, pol))}!!",
        ]
        return rng.choice(forms)

    def t_quote(self, d: Domain, pol: int) -> str:
        rng = self.rng
        friend, pron = rng.choice(FRIENDS)
        q_same = rng.choice(QUOTE_POS if pol else QUOTE_NEG)
        q_opp = rng.choice(QUOTE_NEG if pol else QUOTE_POS)
        who = rng.choice(WHO_QUOTES)
        item = self.item
        title = self.title
        shown = f'"{title}"' if d.quote_titles else title
        forms = [
            f'My {friend} called it "{q_same}", and {pron} was right.',
            f'My {friend} called it "{q_opp}", but {self.clause(d, pol)}.',
            f'{cap(who)} promised "{rng.choice(QUOTE_POS)}", and ' + ("it delivered." if pol else "that was a lie."),
            f"We {d.past} {shown} last {rng.choice(('week', 'month', 'Friday', 'summer'))}, and {self.clause(d, pol)}.",
            f'The word "{self.item_adj(d, pol)}" does not even begin to describe this {item}.',
            f'I went in expecting "{q_opp}" and came out thinking "{q_same}".',
        ]
        return rng.choice(forms)

    def t_paren(self, d: Domain, pol: int) -> str:
        rng = self.rng
        n = rng.choice((2, 3, 4, 6, 12, 20, 45, 90, 120, 300))
        unit = rng.choice(d.units)
        neutral = rng.choice(
            (
                f"{n} {unit} in",
                "a gift from my brother",
                "yes, the one everyone is talking about",
                f"the {rng.choice(('2019', '2021', '2023', 'second', 'updated'))} version",
                "my second attempt",
                "recommended by a stranger",
            )
        )
        tag = (
            rng.choice(("(highly recommended)", "(and I mean that)", "(seriously)", "(trust me)"))
            if pol
            else rng.choice(("(avoid)", "(sadly)", "(trust me)", "(seriously)"))
        )
        forms = [
            f"{cap(self.subject(d))} ({neutral}) {self.vp(d, pol)}.",
            f"{cap(self.clause(d, pol))} {tag}.",
            f"{cap(self.clause(d, pol))}. ({cap(self.neg_clause(d, pol))}.)",
            f"{cap(self.clause(d, pol))} ({neutral}).",
        ]
        return rng.choice(forms)

    def t_numbers(self, d: Domain, pol: int) -> str:
        rng = self.rng
        score = rng.choice(MANY if pol else FEW)
        stars = rng.choice((4, 5) if pol else (1, 2))
        n = rng.choice((2, 3, 4, 5, 6, 10, 14, 30))
        unit = rng.choice(d.units)
        price = rng.choice(("$15", "$40", "€25", "€80", "£12", "$120", "€300", "$7"))
        forms = [
            f"{score}/10: {self.clause(d, pol)}.",
            f"I'd give it {score} out of 10, because {self.clause(d, pol)}.",
            f"{cap(number_word(stars))} star{'s' if stars > 1 else ''}. {cap(self.clause(d, pol))}.",
            f"After {number_text(rng, n)} {unit}, {self.clause(d, pol)}.",
            f"We paid {price} and {self.clause(d, pol)}.",
            f"At {price}, {self.subject(d, start=False)} is "
            + (
                rng.choice(("a bargain", "a steal", "worth every cent"))
                if pol
                else rng.choice(("a rip-off", "daylight robbery", "overpriced"))
            )
            + ".",
        ]
        return rng.choice(forms)

    def t_recommend(self, d: Domain, pol: int) -> str:
        rng = self.rng
        item = self.item
        if pol:
            forms = [
                f"I would {rng.choice(('happily', 'gladly', 'definitely'))} recommend this {item} to "
                f"{rng.choice(('anyone', 'my friends', 'my parents', 'a first-timer'))}.",
                f"Do yourself a favor and {d.base} this {item}.",
                f"If you get the chance to {d.base} this {item}, take it.",
                f"I have already told everyone I know about this {item}.",
            ]
        else:
            forms = [
                f"I would not recommend this {item} to {rng.choice(('anyone', 'my friends', 'my worst enemy'))}.",
                f"Do yourself a favor and skip this {item}.",
                f"Avoid this {item} at all costs.",
                f"Save your money and {d.base} something else.",
            ]
        return rng.choice(forms)

    def t_fragment(self, d: Domain, pol: int) -> str:
        rng = self.rng
        adjs = rng.sample(d.item_pos if pol else d.item_neg, 3)
        item = self.item
        forms = [
            f"{cap(adjs[0])}, {adjs[1]} and {self.intens(pol)}{adjs[2]}.",
            f"{cap(article(adjs[0]))}, {adjs[1]} {item}.",
            f"Simply {adjs[0]} and {adjs[1]}.",
            f"{cap(adjs[0])} from the first minute to the last.",
            f"{cap(self.vp(d, pol))}, honestly.",
        ]
        return rng.choice(forms)

    def t_personal(self, d: Domain, pol: int) -> str:
        rng = self.rng
        a1, _ = self.aspect_adj(d, pol)
        a2, _ = self.aspect_adj(d, pol)
        verbs = LOVE if pol else HATE
        who = rng.choice(
            (
                "I",
                "We",
                "My kids",
                "Everyone at our table" if d.name == "restaurant" else "My friends",
                "My whole family",
                "My partner",
            )
        )
        forms = [
            f"{who} {rng.choice(verbs)} the {a1}.",
            f"{who} {rng.choice(verbs)} the {a1} and the {a2}." if a1 != a2 else f"{who} {rng.choice(verbs)} the {a1}.",
            f"{who} {rng.choice(verbs)} this {self.item}, especially the {a1}.",
        ]
        return rng.choice(forms)

    TEMPLATES = (
        ("t_aspect", 10),
        ("t_two_aspects", 8),
        ("t_vp", 9),
        ("t_but", 13),
        ("t_although", 9),
        ("t_negation", 12),
        ("t_exclaim", 7),
        ("t_quote", 7),
        ("t_paren", 5),
        ("t_numbers", 7),
        ("t_recommend", 5),
        ("t_fragment", 4),
        ("t_personal", 5),
    )

    def make(self, pol: int) -> str:
        rng = self.rng
        names = [n for n, _ in self.TEMPLATES]
        weights = [w for _, w in self.TEMPLATES]
        d = self.domain()
        self.item = rng.choice(d.items)
        self.title = rng.choice(d.titles)
        text = getattr(self, rng.choices(names, weights)[0])(d, pol)
        r = rng.random()
        if r < 0.12:
            text = rng.choice(d.intros) + " " + text
        elif r < 0.18:
            text = rng.choice(GENERIC_INTROS) + " " + text
        if rng.random() < 0.15 and not text.endswith(")"):
            text = text + " " + rng.choice(d.tail_pos if pol else d.tail_neg)
        return text


def valid_text(text: str, min_words: int = MIN_WORDS, max_words: int = MAX_WORDS) -> bool:
    """Fits in one TSV field, and does not open with a quote (which quoting CSV readers would eat)."""
    return (
        min_words <= len(text.split()) <= max_words
        and "\t" not in text
        and "\n" not in text
        and "\r" not in text
        and not text.startswith('"')
        and "  " not in text
    )


def make_sentiment(rng: random.Random, per_label: int) -> list[tuple[str, str]]:
    maker = SentimentMaker(rng)
    seen: set[str] = set()
    rows: list[tuple[str, str]] = []
    for pol in (1, 0):
        count = 0
        while count < per_label:
            text = maker.make(pol)
            key = text.lower()
            if not valid_text(text) or key in seen:
                continue
            seen.add(key)
            rows.append((text, str(pol)))
            count += 1
    return rows


# ====================================================================== entailment

NAMES = (
    ("Maria", "she"),
    ("Tom", "he"),
    ("Aisha", "she"),
    ("Kenji", "he"),
    ("Lucia", "she"),
    ("Omar", "he"),
    ("Priya", "she"),
    ("Daniel", "he"),
    ("Fatima", "she"),
    ("Lars", "he"),
    ("Mei", "she"),
    ("Mateo", "he"),
    ("Grace", "she"),
    ("Ivan", "he"),
    ("Nadia", "she"),
    ("Samuel", "he"),
    ("Yuki", "she"),
    ("Kwame", "he"),
    ("Elena", "she"),
    ("Diego", "he"),
    ("Hannah", "she"),
    ("Rahul", "he"),
    ("Leila", "she"),
    ("Peter", "he"),
    ("Amara", "she"),
    ("Jonas", "he"),
    ("Sofia", "she"),
    ("Carlos", "he"),
    ("Ingrid", "she"),
    ("Felix", "he"),
    ("Zoe", "she"),
    ("Hugo", "he"),
    ("Rosa", "she"),
    ("Tariq", "he"),
    ("Clara", "she"),
    ("Emeka", "he"),
    ("Julia", "she"),
    ("Andrei", "he"),
    ("Noor", "she"),
    ("Paolo", "he"),
    ("Linnea", "she"),
    ("Marcus", "he"),
    ("Ayla", "she"),
    ("Victor", "he"),
    ("Chloe", "she"),
    ("Ravi", "he"),
    ("Björn", "he"),
    ("Zoë", "she"),
)
ROLES = T(
    "nurse|pilot|teacher|farmer|lawyer|chef|plumber|architect|journalist|senator|mayor|painter|"
    "student|engineer|pharmacist|librarian|baker|firefighter|surgeon|mechanic|accountant|carpenter|"
    "photographer|gardener|tailor|fisherman|electrician|dentist|professor|referee|coach|detective|"
    "cashier|courier|waiter|violinist|poet|banker|judge|sailor|scientist|veterinarian|tourist|"
    "shepherd|potter|jeweler|midwife|translator|locksmith|bus driver"
)
ROLE_ADJ = T("young|elderly|tired|cheerful|new|retired|local|experienced|nervous|famous|quiet|tall")
CITIES = (
    ("Lisbon", "Portugal"),
    ("Porto", "Portugal"),
    ("Madrid", "Spain"),
    ("Seville", "Spain"),
    ("Oslo", "Norway"),
    ("Bergen", "Norway"),
    ("Lyon", "France"),
    ("Marseille", "France"),
    ("Osaka", "Japan"),
    ("Kyoto", "Japan"),
    ("Kraków", "Poland"),
    ("Gdansk", "Poland"),
    ("Dublin", "Ireland"),
    ("Cork", "Ireland"),
    ("Nairobi", "Kenya"),
    ("Mombasa", "Kenya"),
    ("Lima", "Peru"),
    ("Cusco", "Peru"),
    ("Hanoi", "Vietnam"),
    ("Hue", "Vietnam"),
    ("Montreal", "Canada"),
    ("Calgary", "Canada"),
    ("Perth", "Australia"),
    ("Adelaide", "Australia"),
    ("Accra", "Ghana"),
    ("Kumasi", "Ghana"),
    ("Busan", "South Korea"),
    ("Incheon", "South Korea"),
    ("Graz", "Austria"),
    ("Salzburg", "Austria"),
    ("Malmö", "Sweden"),
    ("Uppsala", "Sweden"),
    ("Zürich", "Switzerland"),
    ("Geneva", "Switzerland"),
    ("São Paulo", "Brazil"),
    ("Recife", "Brazil"),
)
LOCAL_PLACES = T(
    "at the market|at the harbor|in the garage|behind the library|near the old mill|"
    "at a flea market|in the village square|at the train station|in the back garden|"
    "near the river|at the airport|in the basement|on the farm|at the school fair|"
    "outside the town hall|at the community center"
)
DAYS = T("Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday")
DAY_PARTS = T("morning|afternoon|evening|night")
MONTHS = T("January|February|March|April|May|June|July|August|September|October|November|December")
RELATIVE_TIMES = T(
    "yesterday|last week|at dawn|at noon|after lunch|late at night|earlier this month|over the weekend|during the storm"
)
ADVERBS = T("quickly|carefully|finally|reluctantly|proudly|quietly|eagerly|secretly|happily|nervously")

FILLERS = T(
    "It was a cold, windy morning.|The streets were still wet from the night's rain.|"
    "Few people noticed at the time.|It had been a long week for everyone.|"
    "The town was unusually quiet that day.|Nobody had planned it that way.|"
    "The weather had not improved for days.|Local newspapers later covered the story.|"
    "Prices in the area had not changed in years.|The news spread quickly through the neighborhood.|"
    "It was the first warm day of the year.|Most shops had already closed for the evening.|"
    "The power had been out since the previous night.|Hardly anyone was around.|"
    "A festival was taking place a few streets away.|The forecast had promised sunshine."
)


@dataclass(frozen=True)
class Verb:
    past: str
    base: str
    part: str
    para: tuple[str, ...]
    tags: frozenset[str]
    ant: tuple[str, str, str] | None = None  # past, base, participle
    ant_tags: frozenset[str] | None = None


def V(past, base, part, para, tags, ant=None, ant_tags=None) -> Verb:
    return Verb(
        past,
        base,
        part,
        T(para) if para else (),
        frozenset(tags.split()),
        ant,
        frozenset(ant_tags.split()) if ant_tags else None,
    )


VERBS: tuple[Verb, ...] = (
    V(
        "bought",
        "buy",
        "bought",
        "purchased",
        "pet vehicle instrument tool furniture food smallplant item clothes",
        ("sold", "sell", "sold"),
        "vehicle instrument tool furniture item",
    ),
    V("sold", "sell", "sold", "", "vehicle instrument tool furniture item", ("bought", "buy", "bought")),
    V(
        "repaired",
        "repair",
        "repaired",
        "fixed",
        "vehicle instrument tool furniture device clothes",
        ("broke", "break", "broken"),
        "vehicle instrument tool furniture device",
    ),
    V("painted", "paint", "painted", "", "vehicle furniture"),
    V("washed", "wash", "washed", "cleaned", "washable vehicle clothes"),
    V("fed", "feed", "fed", "gave food to", "animal"),
    V(
        "photographed",
        "photograph",
        "photographed",
        "took a photo of|took a picture of",
        "animal vehicle plant instrument furniture",
    ),
    V(
        "found",
        "find",
        "found",
        "came across|discovered",
        "tool item instrument pet",
        ("lost", "lose", "lost"),
        "tool item instrument",
    ),
    V("lost", "lose", "lost", "misplaced", "tool item instrument", ("found", "find", "found")),
    V("borrowed", "borrow", "borrowed", "", "tool instrument vehicle item", ("lent", "lend", "lent")),
    V("planted", "plant", "planted", "", "plant", ("dug up", "dig up", "dug up")),
    V("delivered", "deliver", "delivered", "dropped off", "furniture food item instrument smallplant"),
    V("cooked", "cook", "cooked", "prepared", "cookable"),
    V("baked", "bake", "baked", "made", "baked"),
    V("adopted", "adopt", "adopted", "took in", "pet", ("gave away", "give away", "given away")),
    V("rescued", "rescue", "rescued", "saved", "animal"),
    V("sketched", "sketch", "sketched", "drew", "animal vehicle plant instrument furniture"),
    V("rented", "rent", "rented", "hired", "vehicle tool"),
    V("carried", "carry", "carried", "", "tool instrument food item smallplant pet"),
    V("stole", "steal", "stolen", "took", "vehicle instrument item tool", ("returned", "return", "returned")),
    V("tuned", "tune", "tuned", "", "instrument"),
    V("packed", "pack", "packed", "", "item tool clothes", ("unpacked", "unpack", "unpacked")),
    V("watered", "water", "watered", "", "plant"),
    V("inspected", "inspect", "inspected", "examined|checked", "vehicle tool furniture instrument device"),
    V("rode", "ride", "ridden", "", "rideable"),
    V("wrapped", "wrap", "wrapped", "", "item instrument clothes", ("unwrapped", "unwrap", "unwrapped")),
    V("hid", "hide", "hidden", "concealed", "item tool instrument"),
    V("ordered", "order", "ordered", "", "food furniture item"),
    V("donated", "donate", "donated", "gave away", "furniture instrument clothes item vehicle"),
    V("polished", "polish", "polished", "", "vehicle furniture instrument jewelry"),
    V("chased", "chase", "chased", "", "animal"),
    V("groomed", "groom", "groomed", "brushed", "washable"),
    V("knitted", "knit", "knitted", "made", "knit"),
    V("ate", "eat", "eaten", "", "edible"),
)


@dataclass(frozen=True)
class Thing:
    chain: tuple[str, ...]  # hyponym first: ("poodle", "dog", "animal")
    tags: frozenset[str]
    adjs: tuple[str, ...]


def _things() -> tuple[Thing, ...]:
    groups = [
        (
            "animal pet washable",
            "tiny old friendly shy scruffy brown spotted sleepy",
            "poodle,dog,animal|beagle,dog,animal|terrier,dog,animal|collie,dog,animal|dachshund,dog,animal|"
            "greyhound,dog,animal",
        ),
        (
            "animal pet",
            "tiny grey fluffy shy sleepy striped",
            "kitten,cat,animal|Siamese cat,cat,animal|tabby cat,cat,animal|Persian cat,cat,animal",
        ),
        (
            "animal pet",
            "noisy green young tame colorful",
            "parrot,bird,animal|canary,bird,animal|cockatoo,bird,animal|budgie,bird,animal",
        ),
        (
            "animal rideable washable",
            "old grey gentle young nervous chestnut",
            "pony,horse,animal|stallion,horse,animal|mare,horse,animal",
        ),
        ("animal pet", "small young shy white", "rabbit,animal|hamster,animal|tortoise,animal|guinea pig,animal"),
        (
            "animal",
            "young injured lost wild",
            "fox,animal|hedgehog,animal|deer,animal|seal,animal|owl,bird,animal|heron,bird,animal",
        ),
        (
            "vehicle",
            "old rusty red second-hand shiny battered blue",
            "sedan,car,vehicle|convertible,car,vehicle|hatchback,car,vehicle|station wagon,car,vehicle|"
            "minivan,vehicle|pickup truck,truck,vehicle|dump truck,truck,vehicle|delivery van,van,vehicle|"
            "camper van,van,vehicle|tractor,vehicle",
        ),
        (
            "vehicle rideable",
            "old rusty red second-hand shiny battered",
            "motorbike,vehicle|scooter,vehicle|mountain bike,bicycle,vehicle|tandem,bicycle,vehicle|"
            "racing bike,bicycle,vehicle",
        ),
        ("vehicle", "old leaky wooden red small", "canoe,boat|kayak,boat|sailboat,boat|rowboat,boat|fishing boat,boat"),
        (
            "instrument",
            "old antique cheap dusty beautiful second-hand",
            "violin,string instrument,instrument|cello,string instrument,instrument|"
            "viola,string instrument,instrument|harp,string instrument,instrument|"
            "guitar,string instrument,instrument|banjo,string instrument,instrument|"
            "ukulele,string instrument,instrument|trumpet,brass instrument,instrument|"
            "trombone,brass instrument,instrument|tuba,brass instrument,instrument|"
            "French horn,brass instrument,instrument|flute,wind instrument,instrument|"
            "clarinet,wind instrument,instrument|oboe,wind instrument,instrument|accordion,instrument",
        ),
        (
            "tool",
            "rusty heavy new old cheap battered",
            "hammer,tool|sledgehammer,hammer,tool|mallet,hammer,tool|wrench,tool|screwdriver,tool|handsaw,saw,tool|"
            "chainsaw,saw,tool|hacksaw,saw,tool|power drill,drill,tool|chisel,tool|shovel,tool|rake,tool|"
            "pickaxe,tool|crowbar,tool",
        ),
        (
            "furniture",
            "antique wooden heavy old faded green second-hand",
            "armchair,chair,piece of furniture|rocking chair,chair,piece of furniture|sofa,piece of furniture|"
            "wardrobe,piece of furniture|bookcase,piece of furniture|dresser,piece of furniture|"
            "writing desk,desk,piece of furniture|dining table,table,piece of furniture|"
            "coffee table,table,piece of furniture|bench,piece of furniture|bunk bed,bed,piece of furniture",
        ),
        (
            "food cookable",
            "fresh local organic huge",
            "pumpkin,vegetable|cabbage,vegetable|cauliflower,vegetable|eggplant,vegetable|"
            "trout,fish|mackerel,fish|sea bass,fish",
        ),
        (
            "food edible",
            "ripe fresh huge local",
            "mango,fruit|pineapple,fruit|watermelon,fruit|papaya,fruit|coconut,fruit",
        ),
        (
            "food edible baked",
            "fresh warm homemade huge",
            "baguette,loaf of bread|sourdough loaf,loaf of bread|cheesecake,cake,dessert|carrot cake,cake,dessert|"
            "apple pie,pie,dessert|crème brûlée,dessert|croissant,pastry",
        ),
        (
            "plant",
            "young tall small",
            "oak,tree,plant|birch,tree,plant|maple,tree,plant|pine,tree,plant|"
            "cherry tree,tree,plant|olive tree,tree,plant|apple tree,tree,plant",
        ),
        (
            "plant smallplant",
            "potted small young wilting",
            "tulip,flower,plant|sunflower,flower,plant|orchid,flower,plant|rosebush,shrub,plant|"
            "lavender bush,shrub,plant|fern,plant|cactus,plant|bonsai,plant",
        ),
        (
            "item device",
            "new old second-hand cheap cracked",
            "laptop,computer|desktop computer,computer|smartphone,phone|flip phone,phone|wristwatch,watch|"
            "pocket watch,watch|film camera,camera|digital camera,camera|desk lamp,lamp|floor lamp,lamp",
        ),
        (
            "item",
            "old worn signed rare thick",
            "novel,book|atlas,book|dictionary,book|cookbook,book|poetry collection,book|biography,book",
        ),
        (
            "item jewelry",
            "gold silver antique cheap delicate",
            "necklace,piece of jewelry|bracelet,piece of jewelry|brooch,piece of jewelry|"
            "wedding ring,ring,piece of jewelry|signet ring,ring,piece of jewelry",
        ),
        (
            "item",
            "battered heavy red leather new",
            "suitcase,piece of luggage|trunk,piece of luggage|backpack,bag|duffel bag,bag|briefcase,bag",
        ),
        (
            "clothes knit",
            "warm woolen red thick striped",
            "sweater,piece of clothing|cardigan,piece of clothing|scarf,piece of clothing|wool hat,hat,piece of clothing",
        ),
        (
            "clothes",
            "warm old red new faded",
            "raincoat,coat,piece of clothing|overcoat,coat,piece of clothing|"
            "parka,coat,piece of clothing|straw hat,hat,piece of clothing",
        ),
    ]
    out = []
    for tags, adjs, chains in groups:
        for chain in chains.split("|"):
            out.append(Thing(tuple(chain.split(",")), frozenset(tags.split()), tuple(adjs.split())))
    return tuple(out)


THINGS = _things()


def compatible(verb: Verb, thing: Thing) -> bool:
    return bool(verb.tags & thing.tags)


# ---- the pieces of a simple event, and how to write them


@dataclass(frozen=True)
class Person:
    kind: str  # "name", "role", "someone"
    word: str
    pron: str = "they"
    adj: str | None = None

    def text(self) -> str:
        if self.kind == "name":
            return self.word
        if self.kind == "someone":
            return "someone"
        return "the " + join_words(self.adj or "", self.word)


@dataclass(frozen=True)
class Obj:
    thing: Thing
    level: int = 0
    adj: str | None = None

    def text(self) -> str:
        return article(join_words(self.adj or "", self.thing.chain[self.level]))

    @property
    def noun(self) -> str:
        return self.thing.chain[self.level]


@dataclass(frozen=True)
class Place:
    local: str | None
    city: tuple[str, str] | None
    as_country: bool = False

    def text(self) -> str:
        where = None
        if self.city:
            where = "in " + (self.city[1] if self.as_country else self.city[0])
        if self.local and where:
            return f"{self.local} {where}"
        return self.local or where or ""


@dataclass(frozen=True)
class When:
    kind: str  # "day", "month", "year", "relative"
    a: str
    b: str | None = None  # part of day, or year for "month"
    general: bool = False

    def text(self) -> str:
        if self.kind == "day":
            if self.b and not self.general:
                return f"on {self.a} {self.b}"
            return f"on {self.a}"
        if self.kind == "month":
            return f"in {self.b}" if self.general else f"in {self.a} {self.b}"
        if self.kind == "year":
            return f"in {self.a}"
        return self.a

    def can_generalize(self) -> bool:
        return (self.kind == "day" and self.b is not None) or self.kind == "month"


@dataclass(frozen=True)
class Event:
    subjects: tuple[Person, ...]
    verb: Verb
    obj: Obj
    form: str = "past"  # "past", "para:<text>", "ant", "neg", "never"
    adv: str | None = None
    place: Place | None = None
    when: When | None = None
    passive: bool = False


class Used:
    """Names, roles and cities already in one example, so that new ones stay distinct."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.roles: list[str] = []
        self.cities: list[str] = []


def pick_person(rng: random.Random, used: Used, kind: str | None = None, adj_p: float = 0.3) -> Person:
    kind = kind or ("name" if rng.random() < 0.55 else "role")
    if kind == "name":
        name, pron = rng.choice([n for n in NAMES if n[0] not in used.names])
        used.names.append(name)
        return Person("name", name, pron)
    role = rng.choice([r for r in ROLES if r not in used.roles])
    used.roles.append(role)
    return Person("role", role, "they", rng.choice(ROLE_ADJ) if rng.random() < adj_p else None)


def pick_city(rng: random.Random, used: Used, same_country_as: str | None = None) -> tuple[str, str]:
    pool = [c for c in CITIES if c[0] not in used.cities]
    if same_country_as:
        pool = [c for c in pool if c[1] == same_country_as] or pool
    city = rng.choice(pool)
    used.cities.append(city[0])
    return city


def pick_place(rng: random.Random, used: Used) -> Place:
    r = rng.random()
    if r < 0.45:
        return Place(None, pick_city(rng, used))
    if r < 0.7:
        return Place(rng.choice(LOCAL_PLACES), None)
    return Place(rng.choice(LOCAL_PLACES), pick_city(rng, used))


def pick_when(rng: random.Random) -> When:
    r = rng.random()
    if r < 0.4:
        return When("day", rng.choice(DAYS), rng.choice(DAY_PARTS) if rng.random() < 0.5 else None)
    if r < 0.6:
        return When("month", rng.choice(MONTHS), str(rng.randint(1998, 2023)))
    if r < 0.75:
        return When("year", str(rng.randint(1990, 2023)))
    return When("relative", rng.choice(RELATIVE_TIMES))


def other_when(rng: random.Random, w: When) -> When:
    while True:
        if w.kind == "day":
            new = replace(w, a=rng.choice(DAYS))
        elif w.kind == "month":
            new = replace(w, b=str(rng.randint(1998, 2023))) if rng.random() < 0.6 else replace(w, a=rng.choice(MONTHS))
        elif w.kind == "year":
            new = replace(w, a=str(rng.randint(1990, 2023)))
        else:
            new = replace(w, a=rng.choice(RELATIVE_TIMES))
        if new.text() != w.text():
            return new


def other_place(rng: random.Random, used: Used, p: Place) -> Place:
    if p.city and (rng.random() < 0.7 or not p.local):
        r = rng.random()
        if r < 0.4:
            return replace(p, city=pick_city(rng, used, same_country_as=p.city[1]), as_country=False)
        if r < 0.7 or p.as_country:
            return replace(p, city=pick_city(rng, used), as_country=False)
        # same kind of statement, another country
        city = pick_city(rng, used)
        while city[1] == p.city[1]:
            city = pick_city(rng, used)
        return replace(p, city=city, as_country=True)
    while True:
        new = replace(p, local=rng.choice(LOCAL_PLACES))
        if new.local != p.local:
            return new


def pick_event(rng: random.Random, used: Used, subj_kind: str | None = None) -> Event:
    verb = rng.choice(VERBS)
    thing = rng.choice([t for t in THINGS if compatible(verb, t)])
    obj = Obj(thing, 0, rng.choice(thing.adjs) if rng.random() < 0.35 else None)
    subjects = (pick_person(rng, used, subj_kind),)
    return Event(
        subjects=subjects,
        verb=verb,
        obj=obj,
        adv=rng.choice(ADVERBS) if rng.random() < 0.15 else None,
        place=pick_place(rng, used) if rng.random() < 0.7 else None,
        when=pick_when(rng) if rng.random() < 0.55 else None,
    )


def subjects_text(people: tuple[Person, ...]) -> str:
    return " and ".join(p.text() for p in people)


def verb_phrase(ev: Event) -> str:
    """The verb with its object, e.g. 'carefully repaired an old violin'."""
    v = ev.verb
    if ev.passive:
        if ev.form in ("neg", "never"):
            aux = "was not" if ev.form == "neg" else "was never"
            return join_words(aux, v.part)
        part = v.ant[2] if ev.form == "ant" else v.part
        return join_words("was", ev.adv or "", part)
    if ev.form == "neg":
        return f"did not {v.base} {ev.obj.text()}"
    if ev.form == "never":
        return f"never {v.past} {ev.obj.text()}"
    if ev.form == "ant":
        word = v.ant[0]
    elif ev.form.startswith("para:"):
        word = ev.form[5:]
    else:
        word = v.past
    return join_words(ev.adv or "", word, ev.obj.text())


def render_event(rng: random.Random, ev: Event) -> str:
    subj = subjects_text(ev.subjects)
    place = ev.place.text() if ev.place else ""
    when = ev.when.text() if ev.when else ""
    core = f"{ev.obj.text()} {verb_phrase(ev)} by {subj}" if ev.passive else f"{subj} {verb_phrase(ev)}"
    r = rng.random()
    if when and r < 0.3:
        return f"{cap(when)}, " + join_words(core, place) + "."
    if place and r < 0.45 and not place.startswith("near"):
        return f"{cap(place)}, " + join_words(core, when) + "."
    return cap(join_words(core, place, when)) + "."


def unrelated_event(rng: random.Random, used: Used, subject: Person | None = None) -> Event:
    ev = pick_event(rng, used)
    if subject is not None:
        ev = replace(ev, subjects=(subject,))
    return ev


# ---- frames: each returns (premise, hypothesis) for the requested label


class EntailmentMaker:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    # ---------------------------------------------------------------- events
    def entail_event(self, ev: Event, used: Used) -> Event:
        """Apply one to three meaning-preserving (or weakening) edits."""
        rng = self.rng
        ops = ["hyper", "drop", "para", "passive", "someone", "country", "time_general"]
        rng.shuffle(ops)
        changed = 0
        hyp = ev
        for op in ops:
            if changed >= rng.choice((1, 1, 2, 3)):
                break
            if op == "hyper" and hyp.obj.level + 1 < len(hyp.obj.thing.chain):
                hyp = replace(
                    hyp, obj=replace(hyp.obj, level=rng.randint(hyp.obj.level + 1, len(hyp.obj.thing.chain) - 1))
                )
            elif op == "drop" and (hyp.obj.adj or hyp.adv or hyp.place or hyp.when or hyp.subjects[0].adj):
                choices = [
                    k
                    for k, v in (
                        ("adj", hyp.obj.adj),
                        ("adv", hyp.adv),
                        ("place", hyp.place),
                        ("when", hyp.when),
                        ("sadj", hyp.subjects[0].adj),
                    )
                    if v
                ]
                k = rng.choice(choices)
                if k == "adj":
                    hyp = replace(hyp, obj=replace(hyp.obj, adj=None))
                elif k == "adv":
                    hyp = replace(hyp, adv=None)
                elif k == "place":
                    if hyp.place.local and hyp.place.city and rng.random() < 0.5:
                        hyp = replace(hyp, place=replace(hyp.place, local=None))
                    else:
                        hyp = replace(hyp, place=None)
                elif k == "when":
                    hyp = replace(hyp, when=None)
                else:
                    hyp = replace(hyp, subjects=(replace(hyp.subjects[0], adj=None),) + hyp.subjects[1:])
            elif op == "para" and hyp.verb.para and not hyp.passive:
                hyp = replace(hyp, form="para:" + rng.choice(hyp.verb.para))
            elif op == "passive" and hyp.form == "past" and len(hyp.subjects) == 1 and rng.random() < 0.6:
                hyp = replace(hyp, passive=True)
            elif op == "someone" and hyp.subjects[0].kind != "someone" and rng.random() < 0.4:
                hyp = replace(hyp, subjects=(Person("someone", "someone"),), passive=False)
            elif op == "country" and hyp.place and hyp.place.city and not hyp.place.as_country:
                hyp = replace(hyp, place=replace(hyp.place, as_country=True, local=None))
            elif op == "time_general" and hyp.when and hyp.when.can_generalize():
                hyp = replace(hyp, when=replace(hyp.when, general=True))
            else:
                continue
            changed += 1
        if hyp.passive and hyp.subjects[0].kind == "someone":
            hyp = replace(hyp, passive=False)
        return hyp

    def soften(self, hyp: Event, someone_ok: bool = True, hyper_ok: bool = True) -> Event:
        """Harmless edits added to non-entailed hypotheses, so that paraphrase or a hypernym alone is no cue.

        `someone_ok` is False where the change is in the subject or the verb's direction ("Maria borrowed
        a rake" does entail "someone lent a rake"); `hyper_ok` is False where the change is in the object
        (a sibling noun's hypernym would be entailed).
        """
        rng = self.rng
        r = rng.random()
        if someone_ok and r < 0.1:
            return replace(hyp, subjects=(Person("someone", "someone"),), passive=False)
        chain = hyp.obj.thing.chain
        if hyper_ok and r < 0.3 and hyp.obj.level + 1 < len(chain):
            return replace(hyp, obj=replace(hyp.obj, level=rng.randint(hyp.obj.level + 1, len(chain) - 1)))
        if r < 0.4 and hyp.verb.para and hyp.form == "past" and not hyp.passive:
            return replace(hyp, form="para:" + rng.choice(hyp.verb.para))
        if r < 0.52 and hyp.form == "past" and len(hyp.subjects) == 1 and hyp.subjects[0].kind != "someone":
            return replace(hyp, passive=True)
        if r < 0.62 and hyp.adv:
            return replace(hyp, adv=None)
        return hyp

    def frame_event(self, label: bool, used: Used) -> tuple[str, str]:
        rng = self.rng
        ev = pick_event(rng, used)
        if label:
            r = rng.random()
            if r < 0.15:
                # conjunction elimination over subjects
                other = pick_person(rng, used, "name" if ev.subjects[0].kind == "name" else "role", adj_p=0)
                prem = replace(ev, subjects=(ev.subjects[0], other) if rng.random() < 0.5 else (other, ev.subjects[0]))
                if rng.random() < 0.35:
                    # keep both people, weaken something else
                    hyp = self.entail_event(prem, used)
                    if hyp == prem or hyp.subjects != prem.subjects:
                        hyp = replace(prem, subjects=prem.subjects[::-1], when=None, place=None)
                        if hyp == replace(prem, subjects=prem.subjects[::-1]):
                            hyp = replace(hyp, obj=replace(hyp.obj, adj=None))
                    return render_event(rng, prem), render_event(rng, hyp)
                hyp = replace(ev, subjects=(rng.choice(prem.subjects),))
                if rng.random() < 0.5:
                    hyp = self.entail_event(hyp, used)
                return render_event(rng, prem), render_event(rng, hyp)
            if r < 0.3:
                # conjunction elimination over two actions
                ev2 = pick_event(rng, used)
                while ev2.verb == ev.verb:
                    ev2 = pick_event(rng, used)
                ev2 = replace(ev2, subjects=ev.subjects, place=None, when=None, adv=None)
                ev1 = replace(ev, place=None)
                first = render_event(rng, replace(ev1, when=None))[:-1]
                prem = cap(
                    f"{first} and {verb_phrase(ev2)}"
                    + (f" {ev.place.text()}" if ev.place else "")
                    + (f" {ev.when.text()}" if ev.when else "")
                    + "."
                )
                target = rng.choice((ev1, ev2))
                hyp = self.entail_event(replace(target, place=None, when=None), used)
                return prem, render_event(rng, hyp)
            if r < 0.36:
                # negated premise: a more specific or more detailed negative follows
                prem = replace(ev, form=rng.choice(("neg", "never")), adv=None)
                if prem.obj.thing.chain[1:]:
                    prem = replace(
                        prem, obj=replace(prem.obj, level=rng.randint(1, len(prem.obj.thing.chain) - 1), adj=None)
                    )
                    hyp = replace(prem, obj=replace(prem.obj, level=0), form="neg")
                else:
                    hyp = replace(prem, obj=replace(prem.obj, adj=rng.choice(prem.obj.thing.adjs)), form="neg")
                if hyp.place is None and rng.random() < 0.5:
                    hyp = replace(hyp, place=pick_place(rng, used))
                prem = replace(prem, place=None) if rng.random() < 0.5 else prem
                if prem.place is not None:
                    hyp = replace(hyp, place=prem.place)
                return render_event(rng, prem), render_event(rng, hyp)
            hyp = self.entail_event(ev, used)
            if hyp == ev:
                hyp = (
                    replace(ev, passive=True)
                    if ev.form == "past"
                    else replace(ev, subjects=(Person("someone", "someone"),))
                )
            return render_event(rng, ev), render_event(rng, hyp)

        # ---- not entailed
        ops = [
            "neg",
            "ant",
            "sibling",
            "hypo",
            "place",
            "when",
            "subject",
            "add_mod",
            "conj_intro",
            "unrelated",
            "swap_actions",
            "ant",
            "sibling",
            "hypo",
            "place",
            "when",
            "subject",
            "unrelated",
            "neg_hyper",
        ]
        while True:
            op = rng.choice(ops)
            prem, hyp = ev, ev
            if op == "neg":
                hyp = replace(ev, form=rng.choice(("neg", "neg", "never")), adv=None)
                if rng.random() < 0.5:
                    hyp = replace(hyp, place=None, when=None)
                break
            if op == "ant" and ev.verb.ant and (ev.verb.ant_tags is None or ev.verb.ant_tags & ev.obj.thing.tags):
                # not "someone": "Maria borrowed a rake" does entail "someone lent a rake"
                hyp = self.soften(replace(ev, form="ant", adv=None), someone_ok=False)
                break
            if op == "sibling":
                sibs = (
                    [
                        t
                        for t in THINGS
                        if len(t.chain) > 1
                        and t.chain[1] == ev.obj.thing.chain[1]
                        and t.chain[0] != ev.obj.thing.chain[0]
                        and compatible(ev.verb, t)
                    ]
                    if len(ev.obj.thing.chain) > 1
                    else []
                )
                if sibs:
                    hyp = self.soften(replace(ev, obj=Obj(rng.choice(sibs), 0, ev.obj.adj)), hyper_ok=False)
                    break
            if op == "hypo" and len(ev.obj.thing.chain) > 1:
                prem = replace(ev, obj=replace(ev.obj, level=rng.randint(1, len(ev.obj.thing.chain) - 1)))
                hyp = self.soften(replace(ev, obj=replace(ev.obj, level=0)), hyper_ok=False)
                break
            if op == "place":
                if ev.place:
                    hyp = replace(ev, place=other_place(rng, used, ev.place))
                else:
                    hyp = replace(ev, place=pick_place(rng, used))
                hyp = self.soften(hyp)
                break
            if op == "when":
                hyp = replace(ev, when=other_when(rng, ev.when) if ev.when else pick_when(rng))
                hyp = self.soften(replace(hyp, place=None) if rng.random() < 0.4 else hyp)
                break
            if op == "subject":
                hyp = replace(ev, subjects=(pick_person(rng, used, ev.subjects[0].kind),))
                hyp = self.soften(hyp, someone_ok=False)
                break
            if op == "add_mod":
                if not ev.obj.adj:
                    hyp = replace(ev, obj=replace(ev.obj, adj=rng.choice(ev.obj.thing.adjs)))
                elif not ev.adv:
                    hyp = replace(ev, adv=rng.choice(ADVERBS))
                else:
                    continue
                if rng.random() < 0.5:
                    hyp = replace(hyp, when=None)
                if rng.random() < 0.2:
                    hyp = replace(hyp, subjects=(Person("someone", "someone"),), passive=False)
                break
            if op == "conj_intro":
                other = pick_person(rng, used, ev.subjects[0].kind, adj_p=0)
                hyp = replace(
                    ev,
                    subjects=(ev.subjects[0], other) if rng.random() < 0.5 else (other, ev.subjects[0]),
                    passive=False,
                )
                break
            if op == "unrelated":
                hyp = unrelated_event(rng, used, ev.subjects[0] if rng.random() < 0.6 else None)
                if hyp.verb == ev.verb:
                    continue
                break
            if op == "swap_actions":
                ev2 = pick_event(rng, used)
                if (
                    not (compatible(ev2.verb, ev.obj.thing) and compatible(ev.verb, ev2.obj.thing))
                    or ev2.verb == ev.verb
                    or ev2.obj.thing == ev.obj.thing
                ):
                    continue
                ev2 = replace(ev2, subjects=ev.subjects, place=None, when=None, adv=None)
                first = render_event(rng, replace(ev, place=None, when=None))[:-1]
                text = cap(f"{first} and {verb_phrase(ev2)}" + (f" {ev.place.text()}" if ev.place else "") + ".")
                hyp = replace(ev2, obj=ev.obj) if rng.random() < 0.5 else replace(ev, obj=ev2.obj, adv=None)
                return text, render_event(rng, replace(hyp, place=None, when=None))
            if op == "neg_hyper" and len(ev.obj.thing.chain) > 1:
                # "did not buy a poodle" says nothing about dogs in general
                prem = replace(ev, form="neg", adv=None, obj=replace(ev.obj, level=0))
                hyp = replace(prem, obj=replace(prem.obj, level=rng.randint(1, len(ev.obj.thing.chain) - 1)))
                if rng.random() < 0.5:
                    hyp = replace(hyp, obj=replace(hyp.obj, adj=None), place=None)
                break
        return render_event(rng, prem), render_event(rng, hyp)

    # ------------------------------------------------------------ converses
    CONVERSES = (
        # forward, converse, forward negated, converse negated, slot, asymmetric state
        (
            "{A} sold {X} to {B}",
            "{B} bought {X} from {A}",
            "{A} did not sell {X} to {B}",
            "{B} did not buy {X} from {A}",
            "sell",
            False,
        ),
        (
            "{A} lent {X} to {B}",
            "{B} borrowed {X} from {A}",
            "{A} did not lend {X} to {B}",
            "{B} did not borrow {X} from {A}",
            "lend",
            False,
        ),
        (
            "{A} gave {X} to {B}",
            "{B} received {X} from {A}",
            "{A} did not give {X} to {B}",
            "{B} did not receive {X} from {A}",
            "give",
            False,
        ),
        (
            "{A} taught {B} {S}",
            "{B} learned {S} from {A}",
            "{A} did not teach {B} {S}",
            "{B} did not learn {S} from {A}",
            "skill",
            False,
        ),
        (
            "{A} beat {B} at {G}",
            "{B} lost to {A} at {G}",
            "{A} did not beat {B} at {G}",
            "{B} did not lose to {A} at {G}",
            "game",
            False,
        ),
        ("{A} hired {B}", "{B} was hired by {A}", "{A} did not hire {B}", "{B} was not hired by {A}", "", False),
        (
            "{A} interviewed {B}",
            "{B} was interviewed by {A}",
            "{A} did not interview {B}",
            "{B} was not interviewed by {A}",
            "",
            False,
        ),
        (
            "{A} is older than {B}",
            "{B} is younger than {A}",
            "{A} is not older than {B}",
            "{B} is not younger than {A}",
            "",
            True,
        ),
        (
            "{A} is taller than {B}",
            "{B} is shorter than {A}",
            "{A} is not taller than {B}",
            "{B} is not shorter than {A}",
            "",
            True,
        ),
        (
            "{A} arrived before {B}",
            "{B} arrived after {A}",
            "{A} did not arrive before {B}",
            "{B} did not arrive after {A}",
            "",
            True,
        ),
        (
            "{A} sent a letter to {B}",
            "{B} received a letter from {A}",
            "{A} did not send a letter to {B}",
            "{B} did not receive a letter from {A}",
            "",
            False,
        ),
        (
            "{A} called {B}",
            "{B} got a call from {A}",
            "{A} did not call {B}",
            "{B} did not get a call from {A}",
            "",
            False,
        ),
        (
            "{A} sat behind {B}",
            "{B} sat in front of {A}",
            "{A} did not sit behind {B}",
            "{B} did not sit in front of {A}",
            "",
            True,
        ),
        (
            "{A} praised {B}",
            "{B} was praised by {A}",
            "{A} did not praise {B}",
            "{B} was not praised by {A}",
            "",
            False,
        ),
        ("{A} thanked {B}", "{B} was thanked by {A}", "{A} did not thank {B}", "{B} was not thanked by {A}", "", False),
        (
            "{A} replaced {B} as {P}",
            "{B} was replaced by {A} as {P}",
            "{A} did not replace {B} as {P}",
            "{B} was not replaced by {A} as {P}",
            "position",
            False,
        ),
        ("{A} coached {B}", "{B} was coached by {A}", "{A} did not coach {B}", "{B} was not coached by {A}", "", False),
        ("{A} visited {B}", "{B} was visited by {A}", "{A} did not visit {B}", "{B} was not visited by {A}", "", False),
        (
            "{A} owes {B} {M}",
            "{B} is owed {M} by {A}",
            "{A} does not owe {B} {M}",
            "{B} is not owed {M} by {A}",
            "money",
            False,
        ),
        (
            "{A} is {B}'s landlord",
            "{B} rents a flat from {A}",
            "{A} is not {B}'s landlord",
            "{B} does not rent a flat from {A}",
            "",
            False,
        ),
    )
    SKILLS = T("chess|Spanish|the violin|to swim|to drive|calculus|pottery|to bake bread|Japanese|to sail")
    GAMES = T("chess|tennis|table tennis|darts|poker|Scrabble|badminton|squash|backgammon|arm wrestling")
    POSITIONS = T("team captain|head chef|class president|lead singer|club treasurer|shift manager")
    MONEY = T("two hundred euros|fifty dollars|a favor|three thousand kroner|a week's wages")
    CONTEXT_EVENT = T(
        "after a long negotiation|without telling anyone|at the last minute|"
        "after the meeting|during the festival|for the second time|in front of everyone"
    )

    def slot_values(self, slot: str, used: Used) -> dict[str, str]:
        rng = self.rng
        if slot in ("sell", "lend", "give"):
            verb = {"sell": VERBS[1], "lend": VERBS[9], "give": VERBS[28]}[slot]
            thing = rng.choice([t for t in THINGS if compatible(verb, t)])
            return {"X": Obj(thing, 0, rng.choice(thing.adjs) if rng.random() < 0.4 else None).text()}
        if slot == "skill":
            return {"S": rng.choice(self.SKILLS)}
        if slot == "game":
            return {"G": rng.choice(self.GAMES)}
        if slot == "position":
            return {"P": rng.choice(self.POSITIONS)}
        if slot == "money":
            return {"M": rng.choice(self.MONEY)}
        return {}

    def frame_converse(self, label: bool, used: Used) -> tuple[str, str]:
        rng = self.rng
        fwd, conv, fwd_n, conv_n, slot, asym = rng.choice(self.CONVERSES)
        kind = "name" if rng.random() < 0.6 else "role"
        a = pick_person(rng, used, kind, adj_p=0).text()
        b = pick_person(rng, used, kind, adj_p=0).text()
        vals = self.slot_values(slot, used)
        is_state = " is " in fwd or "owes" in fwd
        fill = lambda tpl, x, y, **kw: tpl.format(A=x, B=y, **{**vals, **kw})  # noqa: E731

        def decorate(text: str) -> str:
            if is_state or rng.random() < 0.4:
                return cap(text) + "."
            r = rng.random()
            if r < 0.4:
                return f"{cap(pick_when(rng).text())}, {text}."
            if r < 0.7:
                return cap(text) + " " + rng.choice(self.CONTEXT_EVENT) + "."
            return cap(text) + f" in {pick_city(rng, used)[0]}."

        prem_neg = rng.random() < 0.15
        if label:
            if prem_neg:
                prem = decorate(fill(fwd_n, a, b))
                hyp = cap(fill(conv_n, a, b)) + "."
            else:
                r = rng.random()
                prem_tpl, hyp_tpl = (fwd, conv) if rng.random() < 0.7 else (conv, fwd)
                if asym and r < 0.3:
                    hyp_tpl = fwd_n if prem_tpl == fwd else conv_n
                    prem, hyp = decorate(fill(prem_tpl, a, b)), cap(fill(hyp_tpl, b, a)) + "."
                elif r < 0.85:
                    prem, hyp = decorate(fill(prem_tpl, a, b)), cap(fill(hyp_tpl, a, b)) + "."
                else:
                    prem, hyp = decorate(fill(prem_tpl, a, b)), cap(fill(prem_tpl, a, b)) + "."
                    if prem == hyp:
                        prem = cap(fill(prem_tpl, a, b)) + f" in {pick_city(rng, used)[0]}."
            return prem, hyp
        if prem_neg:
            prem = decorate(fill(fwd_n, a, b))
            hyp = cap(fill(rng.choice((fwd, conv)), a, b)) + "."
            return prem, hyp
        prem_tpl = fwd if rng.random() < 0.7 else conv
        prem = decorate(fill(prem_tpl, a, b))
        r = rng.random()
        if r < 0.3:
            hyp = fill(prem_tpl, b, a)  # swapped roles, same wording
        elif r < 0.55:
            hyp = fill(conv if prem_tpl == fwd else fwd, b, a)  # converse wording, swapped roles
        elif r < 0.75:
            hyp = fill(fwd_n if prem_tpl == fwd else conv_n, a, b)  # direct negation
            if rng.random() < 0.5:
                hyp = fill(conv_n if prem_tpl == fwd else fwd_n, a, b)
        elif r < 0.9 or not vals:
            c = pick_person(rng, used, kind, adj_p=0).text()
            hyp = fill(rng.choice((fwd, conv)), *((c, b) if rng.random() < 0.5 else (a, c)))
        else:
            new_vals = self.slot_values(slot, used)
            hyp = rng.choice((fwd, conv)).format(A=a, B=b, **new_vals)
            if hyp == fill(fwd, a, b) or hyp == fill(conv, a, b):
                hyp = fill(prem_tpl, b, a)
        return prem, cap(hyp) + "."

    # ---------------------------------------------------------- comparisons
    COMPARE_SETS = (
        (
            ("the {} suitcase", T("red|blue|green|black|yellow|grey")),
            (
                ("heavier", "lighter", "weighs {} kilograms", (8, 35)),
                ("bigger", "smaller", None, None),
                ("older", "newer", None, None),
            ),
        ),
        (
            ("the {} trail", T("northern|coastal|forest|river|mountain|eastern|lakeside")),
            (
                ("longer", "shorter", "is {} kilometers long", (3, 40)),
                ("steeper", "gentler", None, None),
                ("busier", "quieter", None, None),
            ),
        ),
        (
            ("the {} bridge", T("old|new|railway|stone|northern|wooden")),
            (
                ("longer", "shorter", "is {} meters long", (40, 900)),
                ("wider", "narrower", None, None),
                ("older", "newer", "was built in {}", (1850, 2015)),
            ),
        ),
        (
            ("{}'s car", tuple(n for n, _ in NAMES)),
            (
                ("faster", "slower", None, None),
                ("older", "newer", "was made in {}", (1995, 2023)),
                ("more expensive", "cheaper", "cost {} euros", (900, 30000)),
            ),
        ),
        (
            ("the {}", T("kitchen|bedroom|attic|living room|study|cellar|guest room")),
            (
                ("warmer", "colder", "was at {} degrees", (8, 26)),
                ("bigger", "smaller", None, None),
                ("brighter", "darker", None, None),
            ),
        ),
        (
            ("the {} exam", T("history|chemistry|final|first|oral|geography|music")),
            (("easier", "harder", None, None), ("longer", "shorter", "lasted {} minutes", (30, 180))),
        ),
        (
            ("the {} tower", T("clock|water|radio|bell|stone|glass")),
            (
                ("taller", "shorter", "is {} meters tall", (12, 140)),
                ("older", "newer", "was built in {}", (1700, 2010)),
            ),
        ),
    )

    def frame_compare(self, label: bool, used: Used) -> tuple[str, str]:
        rng = self.rng
        (pattern, fillers), adj_pairs = rng.choice(self.COMPARE_SETS)
        f1, f2 = rng.sample(fillers, 2)
        e1, e2 = pattern.format(f1), pattern.format(f2)
        more, less, measure, span = rng.choice(adj_pairs)
        # "older" by year means smaller number; handle by direction flag
        year_like = measure is not None and ("built" in measure or "made" in measure)
        if measure and rng.random() < 0.25:
            lo, hi = span
            n1, n2 = rng.sample(range(lo, hi + 1), 2)
            s1 = (
                f"{cap(e1)} {measure.format(n1)}, and {e2} {measure.format(n2)}."
                if rng.random() < 0.5
                else f"{cap(e1)} {measure.format(n1)}. {cap(e2)} {measure.format(n2)}."
            )
            first_more = (n1 > n2) != year_like
            big, small = (e1, e2) if first_more else (e2, e1)
            prem = s1
        else:
            big, small = (e1, e2)
            prem = cap(f"{big} is {more} than {small}.") if not year_like else cap(f"{big} is {more} than {small}.")
            if rng.random() < 0.3:
                prem += " " + rng.choice(
                    (
                        "Everyone who has seen both agrees.",
                        "The difference is easy to notice.",
                        "Few visitors realize this.",
                        "The guidebook says so, too.",
                    )
                )
        if label:
            hyp = rng.choice(
                (
                    f"{small} is {less} than {big}",
                    f"{big} is {more} than {small}",
                    f"{small} is not {more} than {big}",
                    f"{small} is {less} than {big}",
                )
            )
        else:
            hyp = rng.choice(
                (
                    f"{small} is {more} than {big}",
                    f"{big} is {less} than {small}",
                    f"{big} is not {more} than {small}",
                    f"{small} is {more} than {big}",
                )
            )
        return prem, cap(hyp) + "."

    # ---------------------------------------------------------------- states
    # subjects, pole, opposite pole, whether the two are complementary, how a place attaches
    SCALES = (
        (
            T(
                "museum|library|pharmacy|post office|bakery|swimming pool|border crossing|ski lift|old theater|"
                "bridge|market hall|botanical garden"
            ),
            ("was open", "was not open", ()),
            ("was closed", "was not closed", ("was shut",)),
            True,
            "in",
        ),
        (
            T("hall|stadium|restaurant|car park|beach|night train|waiting room|lecture theater"),
            ("was full", "was not full", ("was packed",)),
            ("was empty", "was not empty", ("was deserted",)),
            False,
            "in",
        ),
        (
            T("soup|coffee|bath water|tea|radiator|swimming pool"),
            ("was hot", "was not hot", ()),
            ("was cold", "was not cold", ()),
            False,
            None,
        ),
        (
            T("lecture|meeting|ceremony|queue|sermon|wedding speech"),
            ("was short", "was not short", ("was brief",)),
            ("was long", "was not long", ("was lengthy",)),
            False,
            "in",
        ),
        (
            T("exam|hike|crossword|climb|driving test|final round"),
            ("was easy", "was not easy", ("was simple",)),
            ("was difficult", "was not difficult", ("was hard",)),
            False,
            "in",
        ),
        (
            T("street|classroom|neighborhood|hotel corridor|office|reading room"),
            ("was quiet", "was not quiet", ()),
            ("was noisy", "was not noisy", ("was loud",)),
            False,
            "in",
        ),
        (
            T("train|ferry|bus|flight|delivery|night bus"),
            ("arrived early", "did not arrive early", ()),
            ("arrived late", "did not arrive late", ("was delayed",)),
            False,
            "from",
        ),
        (
            T("home team|visiting side|youth squad|women's team"),
            ("won the final", "did not win the final", ()),
            ("lost the final", "did not lose the final", ()),
            True,
            "from",
        ),
        (
            T("experiment|rescue attempt|launch|plan|test flight"),
            ("succeeded", "did not succeed", ("worked",)),
            ("failed", "did not fail", ()),
            True,
            None,
        ),
        (
            T("price of coffee|rent|price of bread|water level|unemployment rate|number of visitors"),
            ("rose", "did not rise", ("went up", "increased")),
            ("fell", "did not fall", ("went down", "decreased")),
            False,
            "in",
        ),
        (
            T("front door|back gate|safe|garden shed|storeroom"),
            ("was locked", "was not locked", ()),
            ("was unlocked", "was not unlocked", ()),
            True,
            None,
        ),
        (
            T("baby|patient|night guard|toddler"),
            ("was asleep", "was not asleep", ("was sleeping",)),
            ("was awake", "was not awake", ()),
            True,
            None,
        ),
        (
            T("answer|forecast|address on the letter|first guess"),
            ("was correct", "was not correct", ("was right",)),
            ("was wrong", "was not wrong", ("was incorrect",)),
            True,
            None,
        ),
    )

    def frame_state(self, label: bool, used: Used) -> tuple[str, str]:
        rng = self.rng
        subjects, pole_a, pole_b, binary, prep = rng.choice(self.SCALES)
        if rng.random() < 0.5:
            pole_a, pole_b = pole_b, pole_a
        subj = rng.choice(subjects)
        city = pick_city(rng, used)
        qual = f" {prep} {city[0]}" if prep and rng.random() < 0.6 else ""
        when = pick_when(rng) if rng.random() < 0.7 else None
        # only complementary pairs get a negated premise: "not open" means closed, "not hot" is not cold
        prem_negated = binary and rng.random() < 0.3

        def sentence(subject: str, pred: str, q: str, w: When | None, front: bool) -> str:
            core = f"the {subject}{q} {pred}"
            if w and front:
                return f"{cap(w.text())}, {core}."
            return cap(join_words(core, w.text() if w else "")) + "."

        prem = sentence(subj, pole_a[1] if prem_negated else pole_a[0], qual, when, rng.random() < 0.5)
        h_qual = qual if rng.random() < 0.5 else ""
        h_when = when if rng.random() < 0.5 else None
        if label:
            if prem_negated:
                pred = rng.choice((pole_b[0],) + pole_b[2])  # not open -> closed
            else:
                pred = rng.choice((pole_a[0],) * 2 + pole_a[2] + (pole_b[1],) * 2)
            if pred == (pole_a[1] if prem_negated else pole_a[0]) and h_qual == qual and h_when == when:
                h_when, h_qual = None, ""
                if not when and not qual:
                    prem = prem[:-1] + f" {rng.choice(('that day', 'this morning', 'again'))}."
            return prem, sentence(subj, pred, h_qual, h_when, rng.random() < 0.3)
        r = rng.random()
        if prem_negated:
            pred = rng.choice((pole_a[0],) + pole_a[2])  # contradiction
            return prem, sentence(subj, pred, h_qual, h_when, rng.random() < 0.3)
        if r < 0.35:
            pred = rng.choice((pole_b[0],) + pole_b[2])
        elif r < 0.6:
            pred = pole_a[1]
        elif r < 0.75 and qual:
            other = pick_city(rng, used)
            return prem, sentence(subj, rng.choice((pole_a[0],) + pole_a[2]), f" {prep} {other[0]}", h_when, False)
        elif r < 0.88 and when:
            return prem, sentence(
                subj, rng.choice((pole_a[0],) + pole_a[2]), h_qual, other_when(rng, when), rng.random() < 0.5
            )
        else:
            other_subj = rng.choice([s for s in subjects if s != subj])
            return prem, sentence(other_subj, rng.choice((pole_a[0],) + pole_a[2]), h_qual, h_when, False)
        return prem, sentence(subj, pred, h_qual, h_when, rng.random() < 0.3)

    # ---------------------------------------------------------------- counts
    GROUPS = T(
        "volunteers|students|tourists|fans|workers|nurses|children|runners|passengers|delegates|"
        "farmers|musicians|engineers|cyclists|residents|firefighters|scientists|pilgrims|teachers|miners"
    )
    ACTIVITIES = T(
        "planted trees along the river|cleaned the beach|attended the concert|signed the petition|"
        "finished the marathon|boarded the ferry|joined the protest|visited the exhibition|"
        "donated blood|applied for the grant|took part in the survey|camped by the lake|"
        "sang in the choir|repaired the old footbridge|waited outside the stadium|"
        "were stranded at the airport|watched the eclipse from the hill|lost their luggage"
    )

    def frame_count(self, label: bool, used: Used) -> tuple[str, str]:
        rng = self.rng
        n = rng.choice(list(range(3, 21)) + [24, 30, 37, 40, 45, 52, 60, 75, 80, 96])
        group = rng.choice(self.GROUPS)
        act = rng.choice(self.ACTIVITIES)
        city = pick_city(rng, used)
        when = pick_when(rng)
        tail = join_words(f"in {city[0]}" if rng.random() < 0.6 else "", when.text() if rng.random() < 0.6 else "")
        prem = cap(join_words(number_text(rng, n), group, act, tail)) + "."
        if rng.random() < 0.2:
            prem = rng.choice(FILLERS) + " " + prem

        def h(quant: str, g: str = group, a: str = act) -> str:
            return cap(join_words(quant, g, a)) + "."

        def lower(k):
            return rng.randint(max(1, k // 2), k - 1)

        def higher(k):
            return rng.randint(k + 1, k + max(3, k // 2))

        if label:
            options = [
                lambda: h(f"more than {number_text(rng, lower(n))}"),
                lambda: h(f"at least {number_text(rng, rng.randint(max(1, n // 2), n))}"),
                lambda: h(f"fewer than {number_text(rng, higher(n))}"),
                lambda: h(str(n) if not number_text(rng, n).isdigit() else number_word(n)),
                lambda: h("some"),
                lambda: h(f"over {number_text(rng, lower(n))}"),
                lambda: h(f"no more than {number_text(rng, rng.randint(n, n + 5))}"),
            ]
        else:
            options = [
                lambda: h(f"more than {number_text(rng, rng.randint(n, n + 10))}"),
                lambda: h(f"at least {number_text(rng, higher(n))}"),
                lambda: h(f"fewer than {number_text(rng, rng.randint(max(1, n // 2), n))}"),
                lambda: h(number_text(rng, rng.choice([k for k in range(2, 100) if k != n]))),
                lambda: h("no"),
                lambda: h(number_text(rng, n), rng.choice([g for g in self.GROUPS if g != group])),
                lambda: h(number_text(rng, n), group, rng.choice([a for a in self.ACTIVITIES if a != act])),
                lambda: h("some", rng.choice([g for g in self.GROUPS if g != group])),
                lambda: h(f"no more than {number_text(rng, lower(n))}"),
                lambda: h(f"over {number_text(rng, rng.randint(n, n + 10))}"),
            ]
        return prem, rng.choice(options)()

    # --------------------------------------------------------- appositives
    def frame_appositive(self, label: bool, used: Used) -> tuple[str, str]:
        rng = self.rng
        person = pick_person(rng, used, "name")
        name = person.word
        role = rng.choice(ROLES)
        used.roles.append(role)
        city = pick_city(rng, used)
        ev = replace(pick_event(rng, used), subjects=(person,), adv=None)
        ev = replace(ev, place=None if rng.random() < 0.5 else ev.place)
        vp = join_words(verb_phrase(ev), ev.when.text() if ev.when else "")
        shape = rng.random()
        if shape < 0.4:
            prem = f"{name}, {article(role)} from {city[0]}, {vp}."
            origin = "from"
        elif shape < 0.75:
            prem = f"{name}, who works as {article(role)} in {city[0]}, {vp}."
            origin = "works"
        else:
            since = rng.randint(1995, 2020)
            prem = f"{name} has worked as {article(role)} in {city[0]} since {since}. {cap(person.pron)} {vp}."
            origin = "works"
        other_role = rng.choice([r for r in ROLES if r != role])
        other_city = pick_city(rng, used)

        def where(c: tuple[str, str], use_country: bool) -> str:
            return c[1] if use_country else c[0]

        if label:
            options = [
                lambda: f"{name} is {article(role)}.",
                lambda: f"{name} works as {article(role)}.",
                lambda: (
                    f"{name} is from {where(city, rng.random() < 0.5)}."
                    if origin == "from"
                    else f"{name} works in {where(city, rng.random() < 0.5)}."
                ),
                lambda: render_event(rng, replace(self.entail_event(ev, used), subjects=(Person("role", role),))),
                lambda: render_event(rng, self.entail_event(ev, used)),
                lambda: (
                    f"{cap(article(role))} "
                    + (f"from {city[0]}" if origin == "from" else f"in {city[0]}")
                    + f" {verb_phrase(replace(ev, form='past'))}."
                ),
            ]
        else:
            options = [
                lambda: f"{name} is {article(other_role)}.",
                lambda: f"{name} is {article(other_role)} in {city[0]}.",
                lambda: (
                    f"{name} is from {where(other_city, rng.random() < 0.3)}."
                    if origin == "from"
                    else f"{name} works in {where(other_city, rng.random() < 0.3)}."
                ),
                lambda: f"{name} works as {article(role)} in {other_city[0]}.",
                lambda: render_event(rng, replace(ev, subjects=(Person("role", other_role),))),
                lambda: render_event(rng, replace(ev, form="neg", passive=False)),
            ]
        return prem, rng.choice(options)()

    # ----------------------------------------------------------- follow-ups
    PET_NAMES = T("Biscuit|Pepper|Luna|Mango|Pickles|Ziggy|Olive|Noodle|Captain|Maple|Socks|Tofu")
    PRICES = (15, 40, 85, 120, 250, 300, 450, 600, 1200, 2500)

    def money(self, n: int, style: int) -> str:
        amount = f"{n:,}"
        return (f"{amount} euros", f"€{amount}", f"{amount} dollars", f"${amount}")[style]

    def frame_followup(self, label: bool, used: Used) -> tuple[str, str]:
        rng = self.rng
        person = pick_person(rng, used, "name")
        name, pron = person.word, person.pron
        obj_pron = "her" if pron == "she" else "him"
        kind = rng.choice(("price", "price", "hours", "pet"))
        if kind == "pet":
            verb = VERBS[14]  # adopted
            thing = rng.choice([t for t in THINGS if "pet" in t.tags and len(t.chain) == 3])
            ev = Event(
                (person,),
                verb,
                Obj(thing, 0, rng.choice(thing.adjs) if rng.random() < 0.4 else None),
                place=pick_place(rng, used) if rng.random() < 0.5 else None,
            )
            pet = rng.choice(self.PET_NAMES)
            prem = render_event(rng, ev) + f" {cap(pron)} named it {pet}."
            level = rng.randint(0, 1)
            if label:
                return prem, rng.choice(
                    (
                        f"{name}'s new {thing.chain[1]} is called {pet}.",
                        f"{name} adopted {article(thing.chain[level])} called {pet}.",
                        f"{name} gave {article(thing.chain[1])} the name {pet}.",
                    )
                )
            sibs = [t for t in THINGS if "pet" in t.tags and t.chain[1] != thing.chain[1]]
            other = rng.choice(sibs).chain[-2]
            return prem, rng.choice(
                (
                    f"{name}'s new {other} is called {pet}.",
                    f"{name} adopted {article(thing.chain[1])} called "
                    f"{rng.choice([p for p in self.PET_NAMES if p != pet])}.",
                    f"{name} sold {article(thing.chain[level])} called {pet}.",
                    f"{name}'s neighbor adopted {article(thing.chain[1])} called {pet}.",
                )
            )
        if kind == "price":
            verb = rng.choice((VERBS[0], VERBS[17], VERBS[27]))  # bought, rented, ordered
            thing = rng.choice([t for t in THINGS if compatible(verb, t)])
            ev = Event(
                (person,),
                verb,
                Obj(thing, 0, rng.choice(thing.adjs) if rng.random() < 0.4 else None),
                place=pick_place(rng, used) if rng.random() < 0.6 else None,
                when=pick_when(rng) if rng.random() < 0.4 else None,
            )
            n = rng.choice(self.PRICES)
            style = rng.randrange(4)
            prem = render_event(rng, ev) + f" {cap(pron)} paid {self.money(n, style)} for it."
            same_cur = style // 2 * 2 + (1 - style % 2)  # same currency, other notation
            noun = article(thing.chain[rng.randint(0, len(thing.chain) - 1)])
            if label:
                return prem, rng.choice(
                    (
                        f"{name} paid {self.money(n, same_cur)} for {noun}.",
                        f"{name} spent {self.money(n, style)} on {noun}.",
                        f"The {thing.chain[0]} cost {name} {self.money(n, rng.choice((style, same_cur)))}.",
                        f"{name} paid more than {self.money(n // 2, style)} for {noun}.",
                        f"{name} paid less than {self.money(n * 2, style)} for {noun}.",
                        f"The {thing.chain[0]} cost {self.money(n, style)}.",
                    )
                )
            other_n = rng.choice([p for p in self.PRICES if p != n])
            sibs = [t for t in THINGS if len(t.chain) > 1 and t.chain[1] == thing.chain[1] and t != thing]
            other_noun = article(rng.choice(sibs).chain[0]) if sibs else noun
            stranger = pick_person(rng, used, "name").word
            return prem, rng.choice(
                (
                    f"{name} paid {self.money(other_n, rng.choice((style, same_cur)))} for {noun}.",
                    f"{stranger} paid {self.money(n, style)} for {noun}.",
                    f"{name} paid {self.money(n, style)} for {other_noun}.",
                    f"{name} paid less than {self.money(n // 2, style)} for {noun}.",
                    f"{name} paid more than {self.money(n * 2, style)} for {noun}.",
                    f"{name} sold {noun} for {self.money(n, style)}.",
                    f"The {thing.chain[0]} cost {name} {self.money(other_n, style)}.",
                )
            )
        verb = VERBS[2]  # repaired
        thing = rng.choice([t for t in THINGS if compatible(verb, t)])
        ev = Event(
            (person,),
            verb,
            Obj(thing, 0, rng.choice(thing.adjs) if rng.random() < 0.4 else None),
            when=pick_when(rng) if rng.random() < 0.5 else None,
        )
        n = rng.randint(3, 9)
        prem = render_event(rng, ev) + f" It took {obj_pron} {number_word(n)} hours."
        noun = article(thing.chain[rng.randint(0, len(thing.chain) - 1)])
        if label:
            return prem, rng.choice(
                (
                    f"{name} spent {number_word(n)} hours repairing {noun}.",
                    f"It took {name} {number_word(n)} hours to fix {noun}.",
                    f"{name} worked on {noun} for more than {number_word(n - 1)} hours.",
                    f"It took {name} less than {number_word(n + 2)} hours to fix {noun}.",
                )
            )
        other_n = rng.choice([k for k in range(2, 12) if k != n])
        return prem, rng.choice(
            (
                f"{name} spent {number_word(other_n)} hours repairing {noun}.",
                f"It took {name} less than {number_word(n - 1)} hours to fix {noun}.",
                f"{name} spent {number_word(n)} hours painting {noun}.",
                f"{name} worked on {noun} for more than {number_word(n + 1)} hours.",
            )
        )

    # ---------------------------------------------------------------- driver
    FRAMES = (
        ("frame_event", 40),
        ("frame_converse", 10),
        ("frame_state", 12),
        ("frame_count", 9),
        ("frame_compare", 7),
        ("frame_appositive", 14),
        ("frame_followup", 8),
    )

    def make(self, label: bool) -> tuple[str, str]:
        rng = self.rng
        used = Used()
        name = rng.choices([f for f, _ in self.FRAMES], [w for _, w in self.FRAMES])[0]
        prem, hyp = getattr(self, name)(label, used)
        r = rng.random()
        if r < 0.12:
            prem = rng.choice(FILLERS) + " " + prem
        elif r < 0.22:
            prem = prem + " " + rng.choice(FILLERS)
        elif r < 0.32 and name != "frame_followup":
            other = render_event(rng, pick_event(rng, used, "name"))
            prem = f"{other} {prem}" if rng.random() < 0.5 else f"{prem} {other}"
        return prem, hyp


def make_entailment(rng: random.Random, per_label: int) -> list[tuple[str, str, str]]:
    maker = EntailmentMaker(rng)
    seen: set[tuple[str, str]] = set()
    rows: list[tuple[str, str, str]] = []
    for label in (True, False):
        count = 0
        while count < per_label:
            prem, hyp = maker.make(label)
            key = (prem.lower(), hyp.lower())
            if key in seen or prem == hyp or not all(valid_text(t, min_words=3, max_words=60) for t in (prem, hyp)):
                continue
            seen.add(key)
            rows.append((prem, hyp, "entailment" if label else "not_entailment"))
            count += 1
    return rows


# ============================================================================ output


def split_balanced(rng: random.Random, rows: list[tuple], label_of, dev_size: int) -> tuple[list, list]:
    """Shuffle, then put dev_size/2 rows of each label in dev and the rest in train."""
    by_label: dict[str, list] = {}
    for row in rows:
        by_label.setdefault(label_of(row), []).append(row)
    train: list = []
    dev: list = []
    for label in sorted(by_label):
        group = by_label[label]
        rng.shuffle(group)
        dev.extend(group[: dev_size // 2])
        train.extend(group[dev_size // 2 :])
    rng.shuffle(train)
    rng.shuffle(dev)
    return train, dev


def write_tsv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["\t".join(header)] + ["\t".join(row) for row in rows]
    for line in lines:
        if "\n" in line or "\r" in line or line.count("\t") != len(header) - 1:
            raise ValueError(f"bad row for {path}: {line!r}")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")


def build(out: Path, seed: int = SEED) -> dict[str, Path]:
    per_label = (TRAIN_SIZE + DEV_SIZE) // 2
    written: dict[str, Path] = {}

    sent = make_sentiment(random.Random(seed), per_label)
    train, dev = split_balanced(random.Random(seed + 1), sent, lambda r: r[1], DEV_SIZE)
    for split, rows in (("train", train), ("dev", dev)):
        path = out / "sentiment" / f"{split}.tsv"
        write_tsv(path, ["sentence", "label"], [list(r) for r in rows])
        written[f"sentiment/{split}"] = path

    ent = make_entailment(random.Random(seed + 2), per_label)
    train, dev = split_balanced(random.Random(seed + 3), ent, lambda r: r[2], DEV_SIZE)
    for split, rows in (("train", train), ("dev", dev)):
        path = out / "entailment" / f"{split}.tsv"
        write_tsv(path, ["index", "sentence1", "sentence2", "label"], [[str(i), *r] for i, r in enumerate(rows)])
        written[f"entailment/{split}"] = path
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="output folder (default: ingest/sources/sample next to this script's repository)",
    )
    parser.add_argument("--seed", type=int, default=SEED, help=f"random seed (default: {SEED})")
    args = parser.parse_args(argv)
    for name, path in build(args.out, args.seed).items():
        n = len(Path(path).read_text(encoding="utf-8").splitlines()) - 1
        print(f"{name}: {n} rows -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
