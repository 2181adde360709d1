"""Writes the shipped tool world: SFT trajectories, RL prompts and eval prompts (SPEC §8 layouts).

A small, seeded, fictional world of 4 servers x 4 tools (weather, finance, travel, shopping)
with real JSON Schemas (types, enums, required lists, nested objects). Every tool answer is
a pure function of (seed, tool, arguments), so the same call always gets the same answer.
A task is drawn from one of 29 "kinds" (a tool plan + question paraphrases); plans cover the
six parallel types of SPEC §8, and multi-step plans feed values returned by one step (a
station id, a ticker, a flight / hotel / product id, a price) into the next. Each row offers
only its server's tools, in the system message, in Qwen2.5's Hermes form (`system_prompt`).

    rl.jsonl, eval.jsonl   verl layout: prompt, tools, reward_model.ground_truth (allowed_tools,
                           gold_tool_calls, question_content, tool_schemas, subset_name,
                           reference_facts), extra_info (parallel_type, kind, tool_responses)
    sft.jsonl              conversations: system, human, gpt <tool_call> per step, human
                           <tool_response>s, ..., gpt summary stating every reference fact

Eval cannot be memorised: its entities (cities, companies and tickers, products, coupon
codes, words) come from separate pools, and it only uses each kind's last question
paraphrase, which train never uses. Train (SFT + RL) questions are all distinct.

    python data/make_world.py [--seed 0] [--out data/world] [--scale 1.0]
"""
import argparse
import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tiny.py
from tiny import tools_prompt  # noqa: E402

SIZES = {"sft": 2000, "rl": 1000, "eval": 200}
TYPES = ["single_step_single_tool", "single_step_parallel", "multi_step_all_serial",
         "multi_step_has_parallel", "multi_step_all_parallel", "irrelevant"]
TYPE_WEIGHTS = [18, 18, 18, 18, 18, 10]  # irrelevant ~10%

INSTRUCTION = ("Use tools when needed: put all calls of one step as a JSON list in one "
               "<tool_call></tool_call> block, then answer with a short summary stating the values found. "
               "If no tool fits, answer directly.")


def system_prompt(tools):
    """The instruction, then the tools as Qwen2.5's chat template writes them (Hermes form)."""
    return INSTRUCTION + "\n\n" + tools_prompt(tools)


# --- tools ----------------------------------------------------------------------------------

def tool(name, description, properties, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


STR = {"type": "string"}
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF"]
METRICS = {"wind": "km/h", "rain": "mm", "pressure": "hPa"}
PERIODS = ["week", "month", "year"]
COUNTRIES = ["US", "DE", "FR", "JP", "BR"]
ID = {"type": "string"}

SERVERS = {
    "weather": [
        tool("get_weather", "Current weather in a city.",
             {"city": STR, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
        tool("get_forecast", "Highs, lows and rain days for the next days, in celsius.",
             {"city": STR, "days": {"type": "integer", "minimum": 1, "maximum": 5}}, ["city", "days"]),
        tool("find_station", "Id of the weather station of a city.", {"city": STR}, ["city"]),
        tool("station_reading", "Latest reading of a weather station.",
             {"station_id": ID, "metric": {"type": "string", "enum": list(METRICS)}}, ["station_id", "metric"]),
    ],
    "finance": [
        tool("find_ticker", "Stock ticker of a company.", {"company": STR}, ["company"]),
        tool("get_quote", "Latest share price in USD.",
             {"ticker": {"type": "string", "pattern": "^[A-Z]{2,5}$"}}, ["ticker"]),
        tool("price_change", "Share price change over a period, in percent.",
             {"ticker": {"type": "string", "pattern": "^[A-Z]{2,5}$"},
              "period": {"type": "string", "enum": PERIODS}}, ["ticker", "period"]),
        tool("convert_currency", "Convert an amount between currencies.",
             {"amount": {"type": "number", "minimum": 0}, "from": {"type": "string", "enum": CURRENCIES},
              "to": {"type": "string", "enum": CURRENCIES}}, ["amount", "from", "to"]),
    ],
    "travel": [
        tool("search_flights", "Flights on a route and date, cheapest first.",
             {"route": {"type": "object", "properties": {"origin": STR, "destination": STR},
                        "required": ["origin", "destination"]},
              "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}}, ["route", "date"]),
        tool("flight_info", "Airline and departure time of a flight.", {"flight_id": ID}, ["flight_id"]),
        tool("search_hotels", "Hotels in a city under a nightly price, cheapest first.",
             {"city": STR, "max_price": {"type": "integer", "minimum": 1},
              "filters": {"type": "object", "properties": {"stars": {"type": "integer", "enum": [3, 4, 5]},
                                                           "breakfast": {"type": "boolean"}}}},
             ["city", "max_price"]),
        tool("hotel_info", "Name and rating of a hotel.", {"hotel_id": ID}, ["hotel_id"]),
    ],
    "shopping": [
        tool("search_products", "Top product for a search query.",
             {"query": STR, "category": {"type": "string", "enum": ["electronics", "home", "sports", "books"]}},
             ["query"]),
        tool("product_info", "Units in stock and rating of a product.", {"product_id": ID}, ["product_id"]),
        tool("shipping_quote", "Shipping days and cost of a product to an address.",
             {"product_id": ID, "address": {"type": "object", "properties": {
                 "country": {"type": "string", "enum": COUNTRIES}, "zip": {"type": "string"}},
                 "required": ["country", "zip"]}}, ["product_id", "address"]),
        tool("apply_coupon", "Price of a product after a coupon code.", {"product_id": ID, "code": STR},
             ["product_id", "code"]),
    ],
}

# --- entities: train and eval pools are disjoint ---------------------------------------------

POOLS = {
    "train": SimpleNamespace(
        cities=["Paris", "Berlin", "Madrid", "Rome", "Vienna", "Prague", "Lisbon", "Dublin", "Oslo",
                "Stockholm", "Helsinki", "Warsaw", "Athens", "Cairo", "Nairobi", "Lagos", "Tokyo", "Seoul",
                "Beijing", "Delhi", "Mumbai", "Bangkok", "Jakarta", "Sydney", "Toronto", "Chicago",
                "Denver", "Boston", "Lima", "Bogota"],
        companies=[("Northwind", "NWND"), ("Globex", "GLBX"), ("Initech", "INIT"), ("Umbrella", "UMBR"),
                   ("Stark Industries", "STRK"), ("Wayne Enterprises", "WAYN"), ("Acme", "ACME"),
                   ("Hooli", "HOOL"), ("Soylent", "SOYL"), ("Cyberdyne", "CYBD"), ("Tyrell", "TYRL"),
                   ("Wonka", "WONK"), ("Oscorp", "OSCP"), ("Vandelay", "VAND"), ("Pied Piper", "PIPR"),
                   ("Dunder Mifflin", "DUND")],
        products=["wireless earbuds", "desk lamp", "yoga mat", "coffee grinder", "running shoes",
                  "mechanical keyboard", "water bottle", "cookbook", "travel guide", "phone charger",
                  "throw pillow", "tennis racket", "smart watch", "crime novel", "air fryer", "bike helmet",
                  "usb hub", "poetry collection"],
        coupons=["SPRING", "WELCOME", "FLASH", "VIP", "HELLO", "BUNDLE"],
        words=["lantern", "meadow", "pickle", "harbor", "velvet", "cobalt", "saffron", "thimble", "walrus",
               "quartz", "juniper", "marble", "tundra", "falcon", "orchid", "pepper"]),
    "eval": SimpleNamespace(
        cities=["Reykjavik", "Tbilisi", "Hanoi", "Montevideo", "Windhoek", "Tallinn", "Valletta", "Kathmandu"],
        companies=[("Massive Dynamic", "MSVD"), ("Aperture", "APTR"), ("Gringotts", "GRNG"),
                   ("Monarch", "MNRC"), ("Virtucon", "VIRT"), ("Nakatomi", "NAKA")],
        products=["electric kettle", "hiking backpack", "webcam", "atlas", "standing desk", "jump rope"],
        coupons=["AUTUMN", "LOYAL"],
        words=["zephyr", "obsidian", "kestrel", "magnolia", "gazebo"]),
}
TICKERS = {name: t for pool in POOLS.values() for name, t in pool.companies}
AIRLINES = {"NA": "Nordair", "SK": "Skyline", "BL": "Bluejet", "AU": "Aurora Air"}
HOTEL_NAMES = ["Hotel Lumen", "The Grand Oak", "Harbor Inn", "Casa Sol", "Park Lodge", "Hotel Mira"]
BRANDS = ["Zentro", "Kiva", "Nordly", "Bravo", "Lumo", "Tessa"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy"]


# --- the world: every answer is a pure function of (seed, tool, arguments) ------------------

class World:
    def __init__(self, seed):
        self.seed = seed

    def rng(self, *key):
        return random.Random("|".join(map(str, (self.seed,) + key)))  # str seeds hash with sha512: stable

    def call(self, name, args):
        return getattr(self, name)(**args)

    def get_weather(self, city, unit="celsius"):
        r = self.rng("weather", city)
        c, cond = r.randint(-5, 34), r.choice(CONDITIONS)
        temp = c if unit == "celsius" else round(c * 9 / 5 + 32)
        return {"city": city, "temp": temp, "unit": "C" if unit == "celsius" else "F", "condition": cond}

    def get_forecast(self, city, days):
        r = self.rng("forecast", city, days)
        highs = [r.randint(0, 35) for _ in range(days)]
        return {"city": city, "days": days, "high": max(highs), "low": min(highs) - r.randint(3, 9),
                "rain_days": r.randint(0, days)}

    def find_station(self, city):
        return {"city": city, "station_id": f"WS-{self.rng('station', city).randint(100, 999)}"}

    def station_reading(self, station_id, metric):
        r = self.rng("reading", station_id, metric)
        value = {"wind": r.randint(0, 60), "rain": round(r.uniform(0, 30), 1), "pressure": r.randint(980, 1040)}[metric]
        return {"station_id": station_id, "metric": metric, "value": value, "unit": METRICS[metric]}

    def find_ticker(self, company):
        return {"company": company, "ticker": TICKERS[company]}

    def get_quote(self, ticker):
        return {"ticker": ticker, "price": round(self.rng("quote", ticker).uniform(10, 900), 2), "currency": "USD"}

    def price_change(self, ticker, period):
        return {"ticker": ticker, "period": period,
                "change_pct": round(self.rng("change", ticker, period).uniform(-15, 15), 1)}

    def convert_currency(self, amount, to, **kw):
        frm = kw["from"]  # "from" is a Python keyword
        rate = round(self.usd_rate(to) / self.usd_rate(frm), 4)
        return {"amount": amount, "from": frm, "to": to, "rate": rate, "result": round(amount * rate, 2)}

    def usd_rate(self, cur):  # units of `cur` per USD
        lo, hi = {"USD": (1, 1), "EUR": (0.85, 0.95), "GBP": (0.72, 0.82), "JPY": (140, 160), "CHF": (0.85, 0.95)}[cur]
        return self.rng("rate", cur).uniform(lo, hi)

    def search_flights(self, route, date):
        r = self.rng("flights", route["origin"], route["destination"], date)
        ids = [f"{r.choice(sorted(AIRLINES))}{r.randint(100, 999)}" for _ in range(2)]
        return {"flights": sorted(({"id": i, "price": r.randint(60, 900)} for i in ids), key=lambda f: f["price"])}

    def flight_info(self, flight_id):
        r = self.rng("flight", flight_id)
        return {"flight_id": flight_id, "airline": AIRLINES.get(flight_id[:2], "Skyline"),
                "departs": f"{r.randint(5, 22):02d}:{r.choice([0, 15, 30, 45]):02d}"}

    def search_hotels(self, city, max_price, filters=None):
        r = self.rng("hotels", city, max_price, json.dumps(filters, sort_keys=True))
        hotels = [{"id": f"H-{r.randint(100, 999)}", "price": r.randint(max_price // 2, max_price)} for _ in range(2)]
        return {"hotels": sorted(hotels, key=lambda h: h["price"])}

    def hotel_info(self, hotel_id):
        r = self.rng("hotel", hotel_id)
        return {"hotel_id": hotel_id, "name": r.choice(HOTEL_NAMES), "rating": round(r.uniform(3, 5), 1)}

    def search_products(self, query, category=None):
        r = self.rng("product", query)
        pid = f"P-{r.randint(1000, 9999)}"
        return {"product_id": pid, "name": f"{r.choice(BRANDS)} {query}", "price": self.price(pid)}

    def price(self, product_id):
        return round(self.rng("price", product_id).uniform(5, 300), 2)

    def product_info(self, product_id):
        r = self.rng("info", product_id)
        return {"product_id": product_id, "in_stock": r.randint(0, 50), "rating": round(r.uniform(2.5, 5), 1)}

    def shipping_quote(self, product_id, address):
        r = self.rng("ship", product_id, address["country"], address["zip"])
        return {"product_id": product_id, "days": r.randint(1, 9), "cost": round(r.uniform(0, 25), 2)}

    def apply_coupon(self, product_id, code):
        pct = self.rng("coupon", code).choice([5, 10, 15, 20, 25])
        return {"product_id": product_id, "code": code, "discount_pct": pct,
                "final_price": round(self.price(product_id) * (100 - pct) / 100, 2)}


def fmt(x):
    """A value as a fact or in a summary: numbers exactly as the tool's JSON writes them."""
    return x if isinstance(x, str) else json.dumps(round(x, 2) if isinstance(x, float) else x)


class Run:
    """Executes a plan step by step and records the gold steps and the responses."""

    def __init__(self, world):
        self.world, self.steps, self.outputs = world, [], []

    def step(self, *calls):  # calls: (name, arguments) pairs of one parallel step
        self.steps.append([{"name": n, "arguments": a} for n, a in calls])
        outs = [self.world.call(n, a) for n, a in calls]
        self.outputs.append(outs)
        return outs


# --- task kinds: a builder (run, rng, pool) -> (question vars, facts, final answer) ----------
# Each kind's LAST paraphrase is eval-only; the others are train-only.

def _date(r):
    return f"2025-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"


def _trip(r, E):
    origin, dest = r.sample(E.cities, 2)
    return dict(origin=origin, destination=dest, date=_date(r), stars=r.choice([3, 4, 5]),
                max_price=r.choice(range(80, 401, 20)))


def _flights(v):
    return ("search_flights", {"route": {"origin": v["origin"], "destination": v["destination"]}, "date": v["date"]})


def _hotels(v, city):
    return ("search_hotels", {"city": city, "max_price": v["max_price"], "filters": {"stars": v["stars"]}})


def _distinct_pair(r, pool, value):
    """Two items of `pool` whose `value`s differ, so "the larger" is well defined."""
    a = r.choice(pool)
    return a, r.choice([b for b in pool if value(b) != value(a)])


def weather_now(run, r, E):
    v = dict(city=r.choice(E.cities), unit=r.choice(["celsius", "fahrenheit"]))
    (w,) = run.step(("get_weather", dict(v)))
    return v, [fmt(w["temp"]), w["condition"]], f"It is {fmt(w['temp'])} degrees {v['unit']} and {w['condition']} in {v['city']} right now."


def forecast(run, r, E):
    v = dict(city=r.choice(E.cities), days=r.randint(2, 5))
    (f,) = run.step(("get_forecast", dict(v)))
    facts = [fmt(f["high"]), fmt(f["low"]), fmt(f["rain_days"])]
    return v, facts, f"Over the next {v['days']} days {v['city']} will reach a high of {facts[0]}°C and a low of {facts[1]}°C, with rain on {facts[2]} of them."


def quote(run, r, E):
    v = dict(ticker=r.choice(E.companies)[1])
    (q,) = run.step(("get_quote", dict(v)))
    return v, [fmt(q["price"])], f"{v['ticker']} is trading at {fmt(q['price'])} USD."


def convert(run, r, E):
    frm, to = r.sample(CURRENCIES, 2)
    v = {"amount": r.randint(10, 2000), "frm": frm, "to": to}
    (c,) = run.step(("convert_currency", {"amount": v["amount"], "from": frm, "to": to}))
    return v, [fmt(c["result"])], f"{v['amount']} {frm} is {fmt(c['result'])} {to} (rate {fmt(c['rate'])})."


def hotel_cheapest(run, r, E):
    v = _trip(r, E)
    (h,) = run.step(_hotels(v, v["destination"]))
    best = h["hotels"][0]
    return v, [best["id"], fmt(best["price"])], f"The cheapest {v['stars']}-star hotel in {v['destination']} under {v['max_price']} is {best['id']} at {fmt(best['price'])} per night."


def product_top(run, r, E):
    v = dict(query=r.choice(E.products))
    (p,) = run.step(("search_products", dict(v)))
    return v, [p["name"], fmt(p["price"])], f"The top result for {v['query']} is {p['name']} at {fmt(p['price'])}."


def weather_compare(run, r, E):
    a, b = _distinct_pair(r, E.cities, lambda c: run.world.get_weather(c)["temp"])
    wa, wb = run.step(("get_weather", {"city": a}), ("get_weather", {"city": b}))
    warmer = a if wa["temp"] > wb["temp"] else b
    diff = fmt(abs(wa["temp"] - wb["temp"]))
    return dict(a=a, b=b), [fmt(wa["temp"]), fmt(wb["temp"]), warmer, diff], (
        f"{a} is at {fmt(wa['temp'])}°C ({wa['condition']}) and {b} at {fmt(wb['temp'])}°C ({wb['condition']}); "
        f"{warmer} is warmer by {diff} degrees.")


def quote_compare(run, r, E):
    (_, a), (_, b) = _distinct_pair(r, E.companies, lambda c: run.world.get_quote(c[1])["price"])
    qa, qb = run.step(("get_quote", {"ticker": a}), ("get_quote", {"ticker": b}))
    higher = a if qa["price"] > qb["price"] else b
    diff = fmt(abs(qa["price"] - qb["price"]))
    return dict(a=a, b=b), [fmt(qa["price"]), fmt(qb["price"]), higher, diff], (
        f"{a} trades at {fmt(qa['price'])} USD and {b} at {fmt(qb['price'])} USD; {higher} is higher by {diff} USD.")


def stock_overview(run, r, E):
    v = dict(ticker=r.choice(E.companies)[1], period=r.choice(PERIODS))
    q, c = run.step(("get_quote", {"ticker": v["ticker"]}), ("price_change", dict(v)))
    return v, [fmt(q["price"]), fmt(c["change_pct"])], (
        f"{v['ticker']} trades at {fmt(q['price'])} USD and changed {fmt(c['change_pct'])}% over the last {v['period']}.")


def trip_cost(run, r, E):
    v = _trip(r, E)
    f, h = run.step(_flights(v), _hotels(v, v["destination"]))
    fp, hp = f["flights"][0]["price"], h["hotels"][0]["price"]
    return v, [fmt(fp), fmt(hp), fmt(fp + hp)], (
        f"The cheapest flight costs {fmt(fp)} and the cheapest {v['stars']}-star hotel {fmt(hp)} per night, "
        f"{fmt(fp + hp)} in total.")


def products_pair(run, r, E):
    a, b = r.sample(E.products, 2)
    pa, pb = run.step(("search_products", {"query": a}), ("search_products", {"query": b}))
    total = fmt(pa["price"] + pb["price"])
    return dict(a=a, b=b), [fmt(pa["price"]), fmt(pb["price"]), total], (
        f"{pa['name']} costs {fmt(pa['price'])} and {pb['name']} costs {fmt(pb['price'])}: {total} together.")


def station(run, r, E):
    v = dict(city=r.choice(E.cities), metric=r.choice(list(METRICS)))
    (s,) = run.step(("find_station", {"city": v["city"]}))
    (x,) = run.step(("station_reading", {"station_id": s["station_id"], "metric": v["metric"]}))
    return v, [s["station_id"], fmt(x["value"])], (
        f"The station in {v['city']} is {s['station_id']}; its latest {v['metric']} reading is {fmt(x['value'])} {x['unit']}.")


def company_price(run, r, E):
    v = dict(company=r.choice(E.companies)[0])
    (t,) = run.step(("find_ticker", dict(v)))
    (q,) = run.step(("get_quote", {"ticker": t["ticker"]}))
    return v, [t["ticker"], fmt(q["price"])], f"{v['company']} trades as {t['ticker']} at {fmt(q['price'])} USD."


def company_price_in(run, r, E):
    v = dict(company=r.choice(E.companies)[0], cur=r.choice(CURRENCIES[1:]))
    (t,) = run.step(("find_ticker", {"company": v["company"]}))
    (q,) = run.step(("get_quote", {"ticker": t["ticker"]}))
    (c,) = run.step(("convert_currency", {"amount": q["price"], "from": "USD", "to": v["cur"]}))
    return v, [t["ticker"], fmt(q["price"]), fmt(c["result"])], (
        f"One {v['company']} ({t['ticker']}) share costs {fmt(q['price'])} USD, which is {fmt(c['result'])} {v['cur']}.")


def flight_detail(run, r, E):
    v = _trip(r, E)
    (f,) = run.step(_flights(v))
    best = f["flights"][0]
    (i,) = run.step(("flight_info", {"flight_id": best["id"]}))
    return v, [best["id"], fmt(best["price"]), i["airline"], i["departs"]], (
        f"The cheapest flight is {best['id']} at {fmt(best['price'])}, operated by {i['airline']}, departing at {i['departs']}.")


def hotel_detail(run, r, E):
    v = _trip(r, E)
    (h,) = run.step(_hotels(v, v["destination"]))
    best = h["hotels"][0]
    (i,) = run.step(("hotel_info", {"hotel_id": best["id"]}))
    return v, [i["name"], fmt(i["rating"]), fmt(best["price"])], (
        f"The cheapest match is {i['name']}, rated {fmt(i['rating'])}, at {fmt(best['price'])} per night.")


def product_detail(run, r, E):
    v = dict(query=r.choice(E.products))
    (p,) = run.step(("search_products", dict(v)))
    (i,) = run.step(("product_info", {"product_id": p["product_id"]}))
    return v, [p["name"], fmt(i["in_stock"]), fmt(i["rating"])], (
        f"The top result is {p['name']}: {fmt(i['in_stock'])} in stock, rated {fmt(i['rating'])}.")


def coupon(run, r, E):
    v = dict(query=r.choice(E.products), code=r.choice(E.coupons))
    (p,) = run.step(("search_products", {"query": v["query"]}))
    (c,) = run.step(("apply_coupon", {"product_id": p["product_id"], "code": v["code"]}))
    return v, [fmt(p["price"]), fmt(c["final_price"])], (
        f"{p['name']} costs {fmt(p['price'])}; with {v['code']} ({c['discount_pct']}% off) it is {fmt(c['final_price'])}.")


def product_buy(run, r, E):
    v = dict(query=r.choice(E.products), country=r.choice(COUNTRIES), zip=f"{r.randint(10000, 99999)}")
    (p,) = run.step(("search_products", {"query": v["query"]}))
    pid = p["product_id"]
    i, s = run.step(("product_info", {"product_id": pid}),
                    ("shipping_quote", {"product_id": pid, "address": {"country": v["country"], "zip": v["zip"]}}))
    total = fmt(p["price"] + s["cost"])
    return v, [fmt(i["in_stock"]), fmt(s["days"]), fmt(s["cost"]), total], (
        f"{p['name']} has {fmt(i['in_stock'])} in stock; shipping takes {fmt(s['days'])} days and costs {fmt(s['cost'])}, "
        f"so {total} in total.")


def company_overview(run, r, E):
    v = dict(company=r.choice(E.companies)[0], period=r.choice(PERIODS))
    (t,) = run.step(("find_ticker", {"company": v["company"]}))
    q, c = run.step(("get_quote", {"ticker": t["ticker"]}), ("price_change", {"ticker": t["ticker"], "period": v["period"]}))
    return v, [t["ticker"], fmt(q["price"]), fmt(c["change_pct"])], (
        f"{v['company']} ({t['ticker']}) trades at {fmt(q['price'])} USD, {fmt(c['change_pct'])}% over the last {v['period']}.")


def station_both(run, r, E):
    m1, m2 = r.sample(list(METRICS), 2)
    v = dict(city=r.choice(E.cities), m1=m1, m2=m2)
    (s,) = run.step(("find_station", {"city": v["city"]}))
    sid = s["station_id"]
    x1, x2 = run.step(("station_reading", {"station_id": sid, "metric": m1}),
                      ("station_reading", {"station_id": sid, "metric": m2}))
    return v, [fmt(x1["value"]), fmt(x2["value"])], (
        f"Station {sid} in {v['city']} reports {m1} {fmt(x1['value'])} {x1['unit']} and {m2} {fmt(x2['value'])} {x2['unit']}.")


def trip_flight(run, r, E):
    v = _trip(r, E)
    f, h = run.step(_flights(v), _hotels(v, v["destination"]))
    best, hp = f["flights"][0], h["hotels"][0]["price"]
    (i,) = run.step(("flight_info", {"flight_id": best["id"]}))
    total = fmt(best["price"] + hp)
    return v, [i["airline"], fmt(best["price"]), fmt(hp), total], (
        f"The cheapest flight is {i['airline']} {best['id']} at {fmt(best['price'])}; the cheapest hotel is "
        f"{fmt(hp)} per night, {total} in total.")


def companies_compare(run, r, E):
    (a, ta), (b, tb) = _distinct_pair(r, E.companies, lambda c: run.world.get_quote(c[1])["price"])
    run.step(("find_ticker", {"company": a}), ("find_ticker", {"company": b}))
    qa, qb = run.step(("get_quote", {"ticker": ta}), ("get_quote", {"ticker": tb}))
    higher = a if qa["price"] > qb["price"] else b
    diff = fmt(abs(qa["price"] - qb["price"]))
    return dict(a=a, b=b), [fmt(qa["price"]), fmt(qb["price"]), higher, diff], (
        f"{a} ({ta}) trades at {fmt(qa['price'])} USD and {b} ({tb}) at {fmt(qb['price'])} USD; "
        f"{higher} is higher by {diff} USD.")


def stations_compare(run, r, E):
    metric = r.choice(list(METRICS))
    def value(city):
        return run.world.station_reading(run.world.find_station(city)["station_id"], metric)["value"]
    a, b = _distinct_pair(r, E.cities, value)
    sa, sb = run.step(("find_station", {"city": a}), ("find_station", {"city": b}))
    xa, xb = run.step(("station_reading", {"station_id": sa["station_id"], "metric": metric}),
                      ("station_reading", {"station_id": sb["station_id"], "metric": metric}))
    higher = a if xa["value"] > xb["value"] else b
    return dict(a=a, b=b, metric=metric), [fmt(xa["value"]), fmt(xb["value"]), higher], (
        f"{a} ({sa['station_id']}) reports {metric} {fmt(xa['value'])} {xa['unit']} and {b} ({sb['station_id']}) "
        f"{fmt(xb['value'])} {xb['unit']}; {higher} is higher.")


def trip_details(run, r, E):
    v = _trip(r, E)
    f, h = run.step(_flights(v), _hotels(v, v["destination"]))
    fl, ho = f["flights"][0], h["hotels"][0]
    i, j = run.step(("flight_info", {"flight_id": fl["id"]}), ("hotel_info", {"hotel_id": ho["id"]}))
    total = fmt(fl["price"] + ho["price"])
    return v, [i["airline"], i["departs"], j["name"], total], (
        f"Fly {i['airline']} {fl['id']} departing {i['departs']} for {fmt(fl['price'])} and stay at {j['name']} for "
        f"{fmt(ho['price'])} a night: {total} in total.")


def products_compare(run, r, E):
    def rating(q):
        return run.world.product_info(run.world.search_products(q)["product_id"])["rating"]
    a, b = _distinct_pair(r, E.products, rating)
    pa, pb = run.step(("search_products", {"query": a}), ("search_products", {"query": b}))
    ia, ib = run.step(("product_info", {"product_id": pa["product_id"]}), ("product_info", {"product_id": pb["product_id"]}))
    better = pa["name"] if ia["rating"] > ib["rating"] else pb["name"]
    return dict(a=a, b=b), [fmt(ia["rating"]), fmt(ib["rating"]), better], (
        f"{pa['name']} is rated {fmt(ia['rating'])} and {pb['name']} {fmt(ib['rating'])}; {better} rates better.")


def irr_add(run, r, E):
    a, b = r.randint(10, 999), r.randint(10, 999)
    return dict(a=a, b=b), [], f"{a} plus {b} is {a + b}."


def irr_mul(run, r, E):
    a, b = r.randint(2, 99), r.randint(2, 20)
    return dict(a=a, b=b), [], f"{a} times {b} is {a * b}."


def irr_letters(run, r, E):
    w = r.choice(E.words)
    return dict(word=w), [], f"The word '{w}' has {len(w)} letters."


def irr_reverse(run, r, E):
    w = r.choice(E.words)
    return dict(word=w), [], f"'{w}' backwards is '{w[::-1]}'."


# kind -> (parallel type, server or None for any, builder, paraphrases; the last is eval-only)
KINDS = {
    "weather_now": ("single_step_single_tool", "weather", weather_now, [
        "What's the weather in {city} right now? Temperature in {unit}, please.",
        "Tell me the current temperature and conditions in {city}, in {unit}.",
        "How is the weather in {city} at the moment (in {unit})?",
        "I'm about to go outside in {city}. What are conditions like now? Use {unit}."]),
    "forecast": ("single_step_single_tool", "weather", forecast, [
        "What's the {days}-day forecast for {city}?",
        "Give me the weather outlook for {city} over the next {days} days.",
        "How hot and how cold will it get in {city} in the coming {days} days?",
        "Planning a visit to {city}: what highs, lows and rain should I expect across the next {days} days?"]),
    "quote": ("single_step_single_tool", "finance", quote, [
        "What is {ticker} trading at?",
        "Get me the latest share price of {ticker}.",
        "Current stock price for {ticker}?",
        "Before the market closes: how much does one {ticker} share cost now?"]),
    "convert": ("single_step_single_tool", "finance", convert, [
        "Convert {amount} {frm} to {to}.",
        "How much is {amount} {frm} in {to}?",
        "What do I get for {amount} {frm} in {to}?",
        "I have {amount} {frm} in cash; what is that worth in {to} today?"]),
    "hotel_cheapest": ("single_step_single_tool", "travel", hotel_cheapest, [
        "Find a {stars}-star hotel in {destination} under {max_price} a night.",
        "Which {stars}-star hotels in {destination} cost less than {max_price} per night?",
        "Search {stars}-star hotels in {destination} with a nightly price below {max_price}.",
        "I need a bed in {destination}, {stars} stars, at most {max_price} per night. What's the cheapest option?"]),
    "product_top": ("single_step_single_tool", "shopping", product_top, [
        "Find me {query}.",
        "What's the top result for {query}?",
        "Search the shop for {query} and tell me the price.",
        "I'd like to buy {query}; which one comes up first and how much is it?"]),
    "weather_compare": ("single_step_parallel", "weather", weather_compare, [
        "Compare the weather in {a} and {b}.",
        "Which is warmer right now, {a} or {b}?",
        "What are the temperatures in {a} and {b} at the moment?",
        "My friends live in {a} and {b}. Whose city is warmer today, and by how much?"]),
    "quote_compare": ("single_step_parallel", "finance", quote_compare, [
        "Compare the share prices of {a} and {b}.",
        "Which is more expensive right now, {a} or {b}?",
        "Get quotes for {a} and {b}.",
        "Between {a} and {b}, which stock costs more per share, and what's the gap?"]),
    "stock_overview": ("single_step_parallel", "finance", stock_overview, [
        "How is {ticker} doing? Give me its price and its change over the last {period}.",
        "What's {ticker}'s current price and its performance this {period}?",
        "Show me the quote for {ticker} and how much it moved over the past {period}.",
        "Is {ticker} up or down across the last {period}, and where does it trade now?"]),
    "trip_cost": ("single_step_parallel", "travel", trip_cost, [
        "I'm flying from {origin} to {destination} on {date}. Find the cheapest flight and a {stars}-star hotel in {destination} under {max_price}.",
        "Search flights from {origin} to {destination} for {date} and {stars}-star hotels in {destination} below {max_price} a night.",
        "What would the cheapest flight from {origin} to {destination} on {date} plus one night in a {stars}-star hotel there (max {max_price}) cost?",
        "Budget check for {date}: cheapest fare {origin} -> {destination}, and the cheapest {stars}-star room in {destination} up to {max_price}. Total?"]),
    "products_pair": ("single_step_parallel", "shopping", products_pair, [
        "Find {a} and {b} and tell me the total price.",
        "How much would {a} plus {b} cost together?",
        "Look up {a} and {b} in the shop.",
        "I'm shopping for {a} and also {b}; what would both come to?"]),
    "station": ("multi_step_all_serial", "weather", station, [
        "What's the latest {metric} reading from the weather station in {city}?",
        "Find the weather station in {city} and get its {metric} reading.",
        "Check the {metric} measured at the weather station of {city}.",
        "Our crew in {city} wants the current {metric} figure from the local station. What is it?"]),
    "company_price": ("multi_step_all_serial", "finance", company_price, [
        "What is the stock price of {company}?",
        "How much is a share of {company} worth?",
        "Look up the ticker of {company} and its current price.",
        "Someone told me about {company}. What does its stock sell for at present?"]),
    "company_price_in": ("multi_step_all_serial", "finance", company_price_in, [
        "What is the share price of {company} in {cur}?",
        "Find the stock price of {company} and convert it to {cur}.",
        "How much does one {company} share cost in {cur}?",
        "I pay in {cur}. What would a single share of {company} cost me?"]),
    "flight_detail": ("multi_step_all_serial", "travel", flight_detail, [
        "Find the cheapest flight from {origin} to {destination} on {date} and tell me who operates it.",
        "What's the cheapest {origin} to {destination} flight on {date}, and when does it leave?",
        "Search flights from {origin} to {destination} on {date} and give me the details of the cheapest one.",
        "I must get to {destination} on {date}, leaving from {origin}. Cheapest option: which airline and departure time?"]),
    "hotel_detail": ("multi_step_all_serial", "travel", hotel_detail, [
        "Find the cheapest {stars}-star hotel in {destination} under {max_price} and tell me its name and rating.",
        "What is the name and rating of the cheapest {stars}-star hotel in {destination} below {max_price} a night?",
        "Look up {stars}-star hotels in {destination} under {max_price} and give me details of the cheapest.",
        "Is the cheapest {stars}-star place in {destination} (max {max_price} per night) any good? Name and rating, please."]),
    "product_detail": ("multi_step_all_serial", "shopping", product_detail, [
        "Find {query} and tell me how many are in stock and its rating.",
        "Is the top result for {query} in stock, and how is it rated?",
        "Search for {query} and get the stock and rating of the first result.",
        "Before I order {query}: how many units of the top pick are left, and what do reviewers give it?"]),
    "coupon": ("multi_step_all_serial", "shopping", coupon, [
        "Find {query} and apply the coupon {code}. What's the final price?",
        "How much is {query} after the code {code}?",
        "Search for {query} and tell me the price with coupon {code}.",
        "I have the code {code}. What would the top {query} cost me with it?"]),
    "product_buy": ("multi_step_has_parallel", "shopping", product_buy, [
        "Find {query}, check its stock and the shipping to {country} {zip}.",
        "Is the top {query} in stock, and what does shipping to zip {zip} in {country} cost?",
        "Search for {query}, then get its stock and a shipping quote for {country}, zip {zip}.",
        "Ordering {query} to postcode {zip} ({country}): is it available, how long is delivery and what's my total?"]),
    "company_overview": ("multi_step_has_parallel", "finance", company_overview, [
        "Find the ticker of {company}, then its price and its change over the last {period}.",
        "How is {company} doing? Price and change this {period}, please.",
        "Give me the current price of {company} and how much it moved over the past {period}.",
        "Thinking of investing in {company}: where is it trading and how did it do over the last {period}?"]),
    "station_both": ("multi_step_has_parallel", "weather", station_both, [
        "Get the {m1} and {m2} readings from the weather station in {city}.",
        "What are the latest {m1} and {m2} values at the station in {city}?",
        "Find the weather station of {city} and read both {m1} and {m2}.",
        "For a report on {city}, I need the local station's current {m1} and {m2} numbers."]),
    "trip_flight": ("multi_step_has_parallel", "travel", trip_flight, [
        "Find the cheapest flight from {origin} to {destination} on {date}, its airline, and the cheapest {stars}-star hotel in {destination} under {max_price}.",
        "Search flights {origin} to {destination} on {date} and {stars}-star hotels there under {max_price}; who operates the cheapest flight and what's the total?",
        "Plan {origin} to {destination} on {date}: cheapest flight with its airline plus the cheapest {stars}-star hotel under {max_price}.",
        "Which airline flies the cheapest {origin} -> {destination} fare on {date}, and what would it plus a {stars}-star room in {destination} (max {max_price}) cost?"]),
    "companies_compare": ("multi_step_all_parallel", "finance", companies_compare, [
        "Which company has the higher share price, {a} or {b}?",
        "Compare the stock prices of {a} and {b}.",
        "Find the tickers of {a} and {b} and compare their prices.",
        "Is a share of {a} worth more than one of {b}? By how much?"]),
    "stations_compare": ("multi_step_all_parallel", "weather", stations_compare, [
        "Compare the {metric} readings of the weather stations in {a} and {b}.",
        "Which city's station reports more {metric}, {a} or {b}?",
        "Get the {metric} from the weather stations of {a} and {b}.",
        "Where is the {metric} figure higher right now according to the local stations: {a} or {b}?"]),
    "trip_details": ("multi_step_all_parallel", "travel", trip_details, [
        "Plan a trip from {origin} to {destination} on {date}: cheapest flight and cheapest {stars}-star hotel under {max_price}, with details of both.",
        "Find the cheapest flight {origin} to {destination} on {date} and the cheapest {stars}-star hotel in {destination} under {max_price}; tell me the airline, departure time and hotel name.",
        "Book-ready info for {origin} to {destination} on {date}: details of the cheapest flight and of the cheapest {stars}-star hotel below {max_price}.",
        "Going {origin} -> {destination} on {date}. Who flies the cheapest fare and when, and what's the cheapest {stars}-star hotel up to {max_price} called? Total cost?"]),
    "products_compare": ("multi_step_all_parallel", "shopping", products_compare, [
        "Which is rated better, the top {a} or the top {b}?",
        "Compare the ratings of {a} and {b}.",
        "Find {a} and {b} and tell me their ratings.",
        "Torn between {a} and {b}: which one do reviewers like more?"]),
    "irr_add": ("irrelevant", None, irr_add, [
        "What is {a} plus {b}?", "Add {a} and {b} for me.", "What's the sum of {a} and {b}?",
        "If I have {a} apples and get {b} more, how many do I have?"]),
    "irr_mul": ("irrelevant", None, irr_mul, [
        "What is {a} times {b}?", "Multiply {a} by {b}.", "What's the product of {a} and {b}?",
        "{b} boxes hold {a} pens each. How many pens is that?"]),
    "irr_letters": ("irrelevant", None, irr_letters, [
        "How many letters are in the word '{word}'?", "Count the letters in '{word}'.",
        "What is the length of the word '{word}'?", "Spelling time: how long is '{word}' in letters?"]),
    "irr_reverse": ("irrelevant", None, irr_reverse, [
        "Spell '{word}' backwards.", "What is '{word}' reversed?", "Write the word '{word}' in reverse order.",
        "Read '{word}' from the last letter to the first. What do you get?"]),
}


# --- rows -------------------------------------------------------------------------------------

def make_example(world, r, split, kind):
    """One task of `kind` for split "train" or "eval" as a plain dict."""
    ptype, server, build, paraphrases = KINDS[kind]
    run = Run(world)
    v, facts, answer = build(run, r, POOLS[split])
    question = r.choice(paraphrases[-1:] if split == "eval" else paraphrases[:-1]).format(**v)
    tools = SERVERS[server or r.choice(sorted(SERVERS))]
    return dict(kind=kind, parallel_type=ptype, question=question, tools=tools, steps=run.steps,
                outputs=run.outputs, facts=facts, answer=answer)


def compact(x):
    return json.dumps(x, ensure_ascii=False, separators=(",", ":"))


def verl_row(ex, split, index):
    names = [t["function"]["name"] for t in ex["tools"]]
    tools_json = compact(ex["tools"])
    # arguments as a JSON string, like the gold: parquet would fill dicts of varying keys with nulls
    responses = [{"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False), "response": compact(o)}
                 for step, outs in zip(ex["steps"], ex["outputs"]) for c, o in zip(step, outs)]
    return {
        "data_source": "slca_world",
        "prompt": [{"role": "system", "content": system_prompt(ex["tools"])},
                   {"role": "user", "content": ex["question"]}],
        "tools": tools_json,
        "reward_model": {"style": "rule", "ground_truth": {
            "allowed_tools": names,
            "gold_tool_calls": json.dumps(ex["steps"], ensure_ascii=False),
            "question_content": ex["question"],
            "tool_schemas": tools_json,
            "subset_name": "irrelevant" if ex["parallel_type"] == "irrelevant" else "tool_call",
            "reference_facts": ex["facts"]}},
        "extra_info": {"split": split, "index": index, "parallel_type": ex["parallel_type"], "kind": ex["kind"],
                       "tool_responses": responses},
    }


def sft_row(ex):
    turns = [{"from": "system", "value": system_prompt(ex["tools"])}, {"from": "human", "value": ex["question"]}]
    for step, outs in zip(ex["steps"], ex["outputs"]):
        turns.append({"from": "gpt", "value": "<tool_call>\n" + json.dumps(step, ensure_ascii=False) + "\n</tool_call>"})
        turns.append({"from": "human", "value": "\n".join(
            f"<tool_response>\n{compact(o)}\n</tool_response>" for o in outs)})
    turns.append({"from": "gpt", "value": ex["answer"]})
    return {"conversations": turns}


def generate(seed=0, scale=1.0):
    """{"sft": rows, "rl": rows, "eval": rows}, deterministic for a seed."""
    world, r = World(seed), random.Random(seed)
    by_type = {t: [k for k, spec in KINDS.items() if spec[0] == t] for t in TYPES}
    out, seen = {}, {"train": set(), "eval": set()}
    for name, n in SIZES.items():
        split = "eval" if name == "eval" else "train"
        rows = []
        while len(rows) < max(1, round(n * scale)):
            ptype = r.choices(TYPES, TYPE_WEIGHTS)[0]
            for _ in range(100):  # redraw (kind too: small kinds run out) until the question is new
                ex = make_example(world, r, split, r.choice(by_type[ptype]))
                if ex["question"] not in seen[split]:
                    break
            seen[split].add(ex["question"])
            rows.append(sft_row(ex) if name == "sft" else verl_row(ex, name, len(rows)))
        out[name] = rows
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="data/world")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every split size (tests use a small one)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in generate(args.seed, args.scale).items():
        path = out / f"{name}.jsonl"
        path.write_text("".join(compact(row) + "\n" for row in rows), encoding="utf-8")
        print(f"{path}: {len(rows)} rows, {path.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
