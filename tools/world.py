"""The shipped tool world itself: its tools, its entities, its answers and its 29 task kinds
(tools/make_world.py writes the rows).

A small, seeded, fictional world of 4 servers x 4 tools (weather, finance, travel, shopping)
with real JSON Schemas (types, enums, required lists, nested objects). Every tool answer is
a pure function of (seed, tool, arguments), so the same call always gets the same answer.
A task is drawn from one of 29 "kinds" (a tool plan + question paraphrases); plans cover the
six parallel types of docs/method.md §8, and multi-step plans feed values returned by one step (a
station id, a ticker, a flight / hotel / product id, a price) into the next.

Sized for a tiny model trained from scratch on a CPU: closed vocabularies (every city, company,
product, coupon, word, date, zip code and id comes from a short list, and training covers all of
them); reference facts are values the tool results state (a price, an id, a rating), never
arithmetic across calls, which a model this size cannot do.
"""
import json
import random

# --- tools ----------------------------------------------------------------------------------

def tool(name, description, properties, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


STR = {"type": "string"}
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF"]
METRICS = {"wind": "km/h", "rain": "mm", "pressure": "hPa"}
PERIODS = ["week", "month", "year"]
COUNTRIES = ["US", "DE", "FR", "JP", "BR"]
TICKER = {"type": "string", "pattern": "^[A-Z]{2,5}$"}

SERVERS = {
    "weather": [
        tool("get_weather", "Current weather.",
             {"city": STR, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
        tool("get_forecast", "High, low and rain days.",
             {"city": STR, "days": {"type": "integer", "minimum": 1, "maximum": 5}}, ["city", "days"]),
        tool("find_station", "Station id of a city.", {"city": STR}, ["city"]),
        tool("station_reading", "Station reading.",
             {"station_id": STR, "metric": {"type": "string", "enum": list(METRICS)}}, ["station_id", "metric"]),
    ],
    "finance": [
        tool("find_ticker", "Ticker of a company.", {"company": STR}, ["company"]),
        tool("get_quote", "Share price in USD.", {"ticker": TICKER}, ["ticker"]),
        tool("price_change", "Price change in percent.",
             {"ticker": TICKER, "period": {"type": "string", "enum": PERIODS}}, ["ticker", "period"]),
        tool("convert_currency", "Convert money.",
             {"amount": {"type": "number", "minimum": 0}, "from": {"type": "string", "enum": CURRENCIES},
              "to": {"type": "string", "enum": CURRENCIES}}, ["amount", "from", "to"]),
    ],
    "travel": [
        tool("search_flights", "Flights, cheapest first.",
             {"route": {"type": "object", "properties": {"origin": STR, "destination": STR},
                        "required": ["origin", "destination"]},
              "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}}, ["route", "date"]),
        tool("flight_info", "Airline and departure.", {"flight_id": STR}, ["flight_id"]),
        tool("search_hotels", "Hotels, cheapest first.",
             {"city": STR, "max_price": {"type": "integer", "minimum": 1},
              "filters": {"type": "object", "properties": {"stars": {"type": "integer", "enum": [3, 4, 5]},
                                                           "breakfast": {"type": "boolean"}}}},
             ["city", "max_price"]),
        tool("hotel_info", "Name and rating.", {"hotel_id": STR}, ["hotel_id"]),
    ],
    "shopping": [
        tool("search_products", "Top product.",
             {"query": STR, "category": {"type": "string", "enum": ["electronics", "home", "sports", "books"]}},
             ["query"]),
        tool("product_info", "Stock and rating.", {"product_id": STR}, ["product_id"]),
        tool("shipping_quote", "Shipping days and cost.",
             {"product_id": STR, "address": {"type": "object", "properties": {
                 "country": {"type": "string", "enum": COUNTRIES}, "zip": {"type": "string"}},
                 "required": ["country", "zip"]}}, ["product_id", "address"]),
        tool("apply_coupon", "Price after a coupon.", {"product_id": STR, "code": STR}, ["product_id", "code"]),
    ],
}

# --- entities: one closed pool; eval holds out combinations, not strings -------------------

CITIES = ["Paris", "Berlin", "Madrid", "Rome", "Vienna", "Oslo", "Tokyo", "Seoul", "Lima", "Cairo"]
COMPANIES = [("Northwind", "NWND"), ("Globex", "GLBX"), ("Initech", "INIT"), ("Umbrella", "UMBR"),
             ("Acme", "ACME"), ("Hooli", "HOOL"), ("Wonka", "WONK"), ("Oscorp", "OSCP")]
PRODUCTS = ["desk lamp", "yoga mat", "coffee grinder", "running shoes", "water bottle", "cookbook",
            "smart watch", "bike helmet"]
COUPONS = ["SPRING", "WELCOME", "FLASH", "VIP"]
WORDS = ["lantern", "meadow", "pickle", "harbor", "velvet", "cobalt", "walrus", "falcon"]
DATES = [f"2025-{m:02d}-{d:02d}" for m in (6, 7) for d in (3, 10, 17, 24)]
ZIPS = ["10115", "75001", "20095", "94103", "60601", "11011"]
MAX_PRICES = [100, 150, 200, 250, 300]
AMOUNTS = [50, 100, 200, 500, 1000]
TICKERS = dict(COMPANIES)
# what a combo is made of: the named things of a task (not its numbers, dates or units)
ENTITIES = set(CITIES) | set(TICKERS) | set(TICKERS.values()) | set(PRODUCTS) | set(COUPONS) | set(WORDS) | set(CURRENCIES)

AIRLINES = {"NA": "Nordair", "SK": "Skyline", "BL": "Bluejet", "AU": "Aurora Air"}
FLIGHT_IDS = [code + n for code in AIRLINES for n in ("12", "34", "56", "78")]  # 16 flights
HOTEL_IDS = [f"H-{n}" for n in range(11, 23)]  # 12 hotels
HOTEL_NAMES = ["Hotel Lumen", "The Grand Oak", "Harbor Inn", "Casa Sol", "Park Lodge", "Hotel Mira"]
BRANDS = ["Zentro", "Kiva", "Nordly", "Bravo"]
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
        value = {"wind": r.randint(0, 60), "rain": r.randint(0, 30), "pressure": r.randint(980, 1040)}[metric]
        return {"station_id": station_id, "metric": metric, "value": value, "unit": METRICS[metric]}

    def find_ticker(self, company):
        return {"company": company, "ticker": TICKERS[company]}

    def get_quote(self, ticker):
        return {"ticker": ticker, "price": round(self.rng("quote", ticker).uniform(10, 900), 1), "currency": "USD"}

    def price_change(self, ticker, period):
        return {"ticker": ticker, "period": period,
                "change_pct": round(self.rng("change", ticker, period).uniform(-15, 15), 1)}

    def convert_currency(self, amount, to, **kw):
        frm = kw["from"]  # "from" is a Python keyword
        rate = round(self.usd_rate(to) / self.usd_rate(frm), 4)
        return {"amount": amount, "from": frm, "to": to, "rate": rate, "result": round(amount * rate, 1)}

    def usd_rate(self, cur):  # units of `cur` per USD
        lo, hi = {"USD": (1, 1), "EUR": (0.85, 0.95), "GBP": (0.72, 0.82), "JPY": (140, 160), "CHF": (0.85, 0.95)}[cur]
        return self.rng("rate", cur).uniform(lo, hi)

    def search_flights(self, route, date):
        r = self.rng("flights", route["origin"], route["destination"], date)
        ids = r.sample(FLIGHT_IDS, 2)
        return {"flights": sorted(({"id": i, "price": r.randint(60, 900)} for i in ids), key=lambda f: f["price"])}

    def flight_info(self, flight_id):
        r = self.rng("flight", flight_id)
        return {"flight_id": flight_id, "airline": AIRLINES.get(flight_id[:2], "Skyline"),
                "departs": f"{r.randint(5, 22):02d}:{r.choice([0, 15, 30, 45]):02d}"}

    def search_hotels(self, city, max_price, filters=None):
        r = self.rng("hotels", city, max_price, json.dumps(filters, sort_keys=True))
        hotels = [{"id": i, "price": r.randint(max_price // 2, max_price)} for i in r.sample(HOTEL_IDS, 2)]
        return {"hotels": sorted(hotels, key=lambda h: h["price"])}

    def hotel_info(self, hotel_id):
        r = self.rng("hotel", hotel_id)
        return {"hotel_id": hotel_id, "name": r.choice(HOTEL_NAMES), "rating": round(r.uniform(3, 5), 1)}

    def search_products(self, query, category=None):
        r = self.rng("product", query)
        pid = f"P-{r.randint(100, 999)}"
        return {"product_id": pid, "name": f"{r.choice(BRANDS)} {query}", "price": self.price(pid)}

    def price(self, product_id):
        return self.rng("price", product_id).randint(5, 300)

    def product_info(self, product_id):
        r = self.rng("info", product_id)
        return {"product_id": product_id, "in_stock": r.randint(0, 50), "rating": round(r.uniform(2.5, 5), 1)}

    def shipping_quote(self, product_id, address):
        r = self.rng("ship", product_id, address["country"], address["zip"])
        return {"product_id": product_id, "days": r.randint(1, 9), "cost": r.randint(0, 25)}

    def apply_coupon(self, product_id, code):
        pct = self.rng("coupon", code).choice([5, 10, 15, 20, 25])
        return {"product_id": product_id, "code": code, "discount_pct": pct,
                "final_price": round(self.price(product_id) * (100 - pct) / 100, 1)}


def fmt(x):
    """A value as a fact or in a summary: numbers exactly as the tool's JSON writes them."""
    return x if isinstance(x, str) else json.dumps(x)


class Run:
    """Executes a plan step by step and records the gold steps and the responses."""

    def __init__(self, world):
        self.world, self.steps, self.outputs = world, [], []

    def step(self, *calls):  # calls: (name, arguments) pairs of one parallel step
        self.steps.append([{"name": n, "arguments": a} for n, a in calls])
        outs = [self.world.call(n, a) for n, a in calls]
        self.outputs.append(outs)
        return outs


# --- task kinds: a builder (run, rng) -> (question vars, facts, final answer) -----------------
# Facts are values the responses state; the answer states every one of them.

def _trip(r):
    origin, dest = r.sample(CITIES, 2)
    return dict(origin=origin, destination=dest, date=r.choice(DATES), stars=r.choice([3, 4, 5]),
                max_price=r.choice(MAX_PRICES))


def _flights(v):
    return ("search_flights", {"route": {"origin": v["origin"], "destination": v["destination"]}, "date": v["date"]})


def _hotels(v):
    return ("search_hotels", {"city": v["destination"], "max_price": v["max_price"], "filters": {"stars": v["stars"]}})


def weather_now(run, r):
    v = dict(city=r.choice(CITIES), unit=r.choice(["celsius", "fahrenheit"]))
    (w,) = run.step(("get_weather", dict(v)))
    return v, [fmt(w["temp"]), w["condition"]], f"It is {fmt(w['temp'])} degrees and {w['condition']} in {v['city']}."


def forecast(run, r):
    v = dict(city=r.choice(CITIES), days=r.randint(2, 5))
    (f,) = run.step(("get_forecast", dict(v)))
    facts = [fmt(f["high"]), fmt(f["low"]), fmt(f["rain_days"])]
    return v, facts, f"High {facts[0]}, low {facts[1]}, rain on {facts[2]} days."


def quote(run, r):
    v = dict(ticker=r.choice(COMPANIES)[1])
    (q,) = run.step(("get_quote", dict(v)))
    return v, [fmt(q["price"])], f"{v['ticker']} trades at {fmt(q['price'])} USD."


def convert(run, r):
    frm, to = r.sample(CURRENCIES, 2)
    v = {"amount": r.choice(AMOUNTS), "frm": frm, "to": to}
    (c,) = run.step(("convert_currency", {"amount": v["amount"], "from": frm, "to": to}))
    return v, [fmt(c["result"])], f"{v['amount']} {frm} is {fmt(c['result'])} {to}."


def hotel_cheapest(run, r):
    v = _trip(r)
    (h,) = run.step(_hotels(v))
    best = h["hotels"][0]
    return v, [best["id"], fmt(best["price"])], f"The cheapest is {best['id']} at {fmt(best['price'])} a night."


def product_top(run, r):
    v = dict(query=r.choice(PRODUCTS))
    (p,) = run.step(("search_products", dict(v)))
    return v, [p["name"], fmt(p["price"])], f"{p['name']} costs {fmt(p['price'])}."


def weather_compare(run, r):
    a, b = r.sample(CITIES, 2)
    wa, wb = run.step(("get_weather", {"city": a}), ("get_weather", {"city": b}))
    return dict(a=a, b=b), [fmt(wa["temp"]), fmt(wb["temp"])], f"{a} is at {fmt(wa['temp'])} and {b} at {fmt(wb['temp'])} degrees."


def quote_compare(run, r):
    (_, a), (_, b) = r.sample(COMPANIES, 2)
    qa, qb = run.step(("get_quote", {"ticker": a}), ("get_quote", {"ticker": b}))
    return dict(a=a, b=b), [fmt(qa["price"]), fmt(qb["price"])], f"{a} trades at {fmt(qa['price'])} and {b} at {fmt(qb['price'])} USD."


def stock_overview(run, r):
    v = dict(ticker=r.choice(COMPANIES)[1], period=r.choice(PERIODS))
    q, c = run.step(("get_quote", {"ticker": v["ticker"]}), ("price_change", dict(v)))
    return v, [fmt(q["price"]), fmt(c["change_pct"])], f"{v['ticker']} trades at {fmt(q['price'])} USD, {fmt(c['change_pct'])}% this {v['period']}."


def trip_cost(run, r):
    v = _trip(r)
    f, h = run.step(_flights(v), _hotels(v))
    fp, hp = f["flights"][0]["price"], h["hotels"][0]["price"]
    return v, [fmt(fp), fmt(hp)], f"The cheapest flight costs {fmt(fp)} and the cheapest hotel {fmt(hp)} a night."


def products_pair(run, r):
    a, b = r.sample(PRODUCTS, 2)
    pa, pb = run.step(("search_products", {"query": a}), ("search_products", {"query": b}))
    return dict(a=a, b=b), [fmt(pa["price"]), fmt(pb["price"])], f"{pa['name']} costs {fmt(pa['price'])} and {pb['name']} {fmt(pb['price'])}."


def station(run, r):
    v = dict(city=r.choice(CITIES), metric=r.choice(list(METRICS)))
    (s,) = run.step(("find_station", {"city": v["city"]}))
    (x,) = run.step(("station_reading", {"station_id": s["station_id"], "metric": v["metric"]}))
    return v, [fmt(x["value"])], f"Station {s['station_id']} reads {v['metric']} {fmt(x['value'])} {x['unit']}."


def company_price(run, r):
    v = dict(company=r.choice(COMPANIES)[0])
    (t,) = run.step(("find_ticker", dict(v)))
    (q,) = run.step(("get_quote", {"ticker": t["ticker"]}))
    return v, [t["ticker"], fmt(q["price"])], f"{v['company']} ({t['ticker']}) trades at {fmt(q['price'])} USD."


def company_price_in(run, r):
    v = dict(company=r.choice(COMPANIES)[0], cur=r.choice(CURRENCIES[1:]))
    (t,) = run.step(("find_ticker", {"company": v["company"]}))
    (q,) = run.step(("get_quote", {"ticker": t["ticker"]}))
    (c,) = run.step(("convert_currency", {"amount": q["price"], "from": "USD", "to": v["cur"]}))
    return v, [fmt(q["price"]), fmt(c["result"])], f"{t['ticker']} costs {fmt(q['price'])} USD, {fmt(c['result'])} {v['cur']}."


def flight_detail(run, r):
    v = _trip(r)
    (f,) = run.step(_flights(v))
    best = f["flights"][0]
    (i,) = run.step(("flight_info", {"flight_id": best["id"]}))
    return v, [best["id"], i["airline"], i["departs"]], f"{best['id']} by {i['airline']}, departing {i['departs']}."


def hotel_detail(run, r):
    v = _trip(r)
    (h,) = run.step(_hotels(v))
    best = h["hotels"][0]
    (i,) = run.step(("hotel_info", {"hotel_id": best["id"]}))
    return v, [i["name"], fmt(i["rating"])], f"{i['name']}, rated {fmt(i['rating'])}."


def product_detail(run, r):
    v = dict(query=r.choice(PRODUCTS))
    (p,) = run.step(("search_products", dict(v)))
    (i,) = run.step(("product_info", {"product_id": p["product_id"]}))
    return v, [fmt(i["in_stock"]), fmt(i["rating"])], f"{p['name']}: {fmt(i['in_stock'])} in stock, rated {fmt(i['rating'])}."


def coupon(run, r):
    v = dict(query=r.choice(PRODUCTS), code=r.choice(COUPONS))
    (p,) = run.step(("search_products", {"query": v["query"]}))
    (c,) = run.step(("apply_coupon", {"product_id": p["product_id"], "code": v["code"]}))
    return v, [fmt(c["final_price"])], f"With {v['code']} it costs {fmt(c['final_price'])}."


def product_buy(run, r):
    v = dict(query=r.choice(PRODUCTS), country=r.choice(COUNTRIES), zip=r.choice(ZIPS))
    (p,) = run.step(("search_products", {"query": v["query"]}))
    pid = p["product_id"]
    i, s = run.step(("product_info", {"product_id": pid}),
                    ("shipping_quote", {"product_id": pid, "address": {"country": v["country"], "zip": v["zip"]}}))
    return v, [fmt(i["in_stock"]), fmt(s["days"]), fmt(s["cost"])], (
        f"{fmt(i['in_stock'])} in stock; shipping takes {fmt(s['days'])} days and costs {fmt(s['cost'])}.")


def company_overview(run, r):
    v = dict(company=r.choice(COMPANIES)[0], period=r.choice(PERIODS))
    (t,) = run.step(("find_ticker", {"company": v["company"]}))
    q, c = run.step(("get_quote", {"ticker": t["ticker"]}), ("price_change", {"ticker": t["ticker"], "period": v["period"]}))
    return v, [fmt(q["price"]), fmt(c["change_pct"])], f"{t['ticker']} trades at {fmt(q['price'])} USD, {fmt(c['change_pct'])}% this {v['period']}."


def station_both(run, r):
    m1, m2 = r.sample(list(METRICS), 2)
    v = dict(city=r.choice(CITIES), m1=m1, m2=m2)
    (s,) = run.step(("find_station", {"city": v["city"]}))
    sid = s["station_id"]
    x1, x2 = run.step(("station_reading", {"station_id": sid, "metric": m1}),
                      ("station_reading", {"station_id": sid, "metric": m2}))
    return v, [fmt(x1["value"]), fmt(x2["value"])], f"{m1} {fmt(x1['value'])} {x1['unit']}, {m2} {fmt(x2['value'])} {x2['unit']}."


def trip_flight(run, r):
    v = _trip(r)
    f, h = run.step(_flights(v), _hotels(v))
    best, hp = f["flights"][0], h["hotels"][0]["price"]
    (i,) = run.step(("flight_info", {"flight_id": best["id"]}))
    return v, [i["airline"], fmt(best["price"]), fmt(hp)], f"{i['airline']} flies for {fmt(best['price'])}; the hotel is {fmt(hp)} a night."


def companies_compare(run, r):
    (a, ta), (b, tb) = r.sample(COMPANIES, 2)
    run.step(("find_ticker", {"company": a}), ("find_ticker", {"company": b}))
    qa, qb = run.step(("get_quote", {"ticker": ta}), ("get_quote", {"ticker": tb}))
    return dict(a=a, b=b), [fmt(qa["price"]), fmt(qb["price"])], f"{a} trades at {fmt(qa['price'])} and {b} at {fmt(qb['price'])} USD."


def stations_compare(run, r):
    metric = r.choice(list(METRICS))
    a, b = r.sample(CITIES, 2)
    sa, sb = run.step(("find_station", {"city": a}), ("find_station", {"city": b}))
    xa, xb = run.step(("station_reading", {"station_id": sa["station_id"], "metric": metric}),
                      ("station_reading", {"station_id": sb["station_id"], "metric": metric}))
    return dict(a=a, b=b, metric=metric), [fmt(xa["value"]), fmt(xb["value"])], (
        f"{a} reads {fmt(xa['value'])} and {b} {fmt(xb['value'])} {xa['unit']}.")


def trip_details(run, r):
    v = _trip(r)
    f, h = run.step(_flights(v), _hotels(v))
    fl, ho = f["flights"][0], h["hotels"][0]
    i, j = run.step(("flight_info", {"flight_id": fl["id"]}), ("hotel_info", {"hotel_id": ho["id"]}))
    return v, [i["airline"], i["departs"], j["name"]], f"Fly {i['airline']} at {i['departs']} and stay at {j['name']}."


def products_compare(run, r):
    a, b = r.sample(PRODUCTS, 2)
    pa, pb = run.step(("search_products", {"query": a}), ("search_products", {"query": b}))
    ia, ib = run.step(("product_info", {"product_id": pa["product_id"]}), ("product_info", {"product_id": pb["product_id"]}))
    return dict(a=a, b=b), [fmt(ia["rating"]), fmt(ib["rating"])], f"{pa['name']} is rated {fmt(ia['rating'])} and {pb['name']} {fmt(ib['rating'])}."


def irr_add(run, r):
    a, b = r.randint(10, 99), r.randint(10, 99)
    return dict(a=a, b=b), [], f"{a} plus {b} is {a + b}."


def irr_mul(run, r):
    a, b = r.randint(2, 12), r.randint(2, 12)
    return dict(a=a, b=b), [], f"{a} times {b} is {a * b}."


def irr_letters(run, r):
    w = r.choice(WORDS)
    return dict(word=w), [], f"'{w}' has {len(w)} letters."


def irr_reverse(run, r):
    w = r.choice(WORDS)
    return dict(word=w), [], f"'{w}' backwards is '{w[::-1]}'."


# kind -> (parallel type, server or None for any, builder, question paraphrases)
KINDS = {
    "weather_now": ("single_step_single_tool", "weather", weather_now, [
        "What's the weather in {city} right now? Temperature in {unit}, please.",
        "Tell me the current temperature and conditions in {city}, in {unit}.",
        "How is the weather in {city} at the moment (in {unit})?"]),
    "forecast": ("single_step_single_tool", "weather", forecast, [
        "What's the {days}-day forecast for {city}?",
        "Give me the weather outlook for {city} over the next {days} days.",
        "How hot and how cold will it get in {city} in the coming {days} days?"]),
    "quote": ("single_step_single_tool", "finance", quote, [
        "What is {ticker} trading at?",
        "Get me the latest share price of {ticker}.",
        "Current stock price for {ticker}?"]),
    "convert": ("single_step_single_tool", "finance", convert, [
        "Convert {amount} {frm} to {to}.",
        "How much is {amount} {frm} in {to}?",
        "What do I get for {amount} {frm} in {to}?"]),
    "hotel_cheapest": ("single_step_single_tool", "travel", hotel_cheapest, [
        "Find a {stars}-star hotel in {destination} under {max_price} a night.",
        "Which {stars}-star hotels in {destination} cost less than {max_price} per night?",
        "Search {stars}-star hotels in {destination} with a nightly price below {max_price}."]),
    "product_top": ("single_step_single_tool", "shopping", product_top, [
        "Find me a {query}.",
        "What's the top result for {query}?",
        "Search the shop for {query} and tell me the price."]),
    "weather_compare": ("single_step_parallel", "weather", weather_compare, [
        "Compare the weather in {a} and {b}.",
        "Which is warmer right now, {a} or {b}?",
        "What are the temperatures in {a} and {b} at the moment?"]),
    "quote_compare": ("single_step_parallel", "finance", quote_compare, [
        "Compare the share prices of {a} and {b}.",
        "Which is more expensive right now, {a} or {b}?",
        "Get quotes for {a} and {b}."]),
    "stock_overview": ("single_step_parallel", "finance", stock_overview, [
        "How is {ticker} doing? Give me its price and its change over the last {period}.",
        "What's {ticker}'s current price and its performance this {period}?",
        "Show me the quote for {ticker} and how much it moved over the past {period}."]),
    "trip_cost": ("single_step_parallel", "travel", trip_cost, [
        "I'm flying from {origin} to {destination} on {date}. Find the cheapest flight and a {stars}-star hotel in {destination} under {max_price}.",
        "Search flights from {origin} to {destination} for {date} and {stars}-star hotels in {destination} below {max_price} a night.",
        "What would the cheapest flight from {origin} to {destination} on {date} and a {stars}-star hotel there (max {max_price}) cost?"]),
    "products_pair": ("single_step_parallel", "shopping", products_pair, [
        "Find {a} and {b} and tell me the prices.",
        "How much do {a} and {b} cost?",
        "Look up {a} and {b} in the shop."]),
    "station": ("multi_step_all_serial", "weather", station, [
        "What's the latest {metric} reading from the weather station in {city}?",
        "Find the weather station in {city} and get its {metric} reading.",
        "Check the {metric} measured at the weather station of {city}."]),
    "company_price": ("multi_step_all_serial", "finance", company_price, [
        "What is the stock price of {company}?",
        "How much is a share of {company} worth?",
        "Look up the ticker of {company} and its current price."]),
    "company_price_in": ("multi_step_all_serial", "finance", company_price_in, [
        "What is the share price of {company} in {cur}?",
        "Find the stock price of {company} and convert it to {cur}.",
        "How much does one {company} share cost in {cur}?"]),
    "flight_detail": ("multi_step_all_serial", "travel", flight_detail, [
        "Find the cheapest flight from {origin} to {destination} on {date} and tell me who operates it.",
        "What's the cheapest {origin} to {destination} flight on {date}, and when does it leave?",
        "Search flights from {origin} to {destination} on {date} and give me the details of the cheapest one."]),
    "hotel_detail": ("multi_step_all_serial", "travel", hotel_detail, [
        "Find the cheapest {stars}-star hotel in {destination} under {max_price} and tell me its name and rating.",
        "What is the name and rating of the cheapest {stars}-star hotel in {destination} below {max_price} a night?",
        "Look up {stars}-star hotels in {destination} under {max_price} and give me details of the cheapest."]),
    "product_detail": ("multi_step_all_serial", "shopping", product_detail, [
        "Find a {query} and tell me how many are in stock and its rating.",
        "Is the top result for {query} in stock, and how is it rated?",
        "Search for {query} and get the stock and rating of the first result."]),
    "coupon": ("multi_step_all_serial", "shopping", coupon, [
        "Find a {query} and apply the coupon {code}. What's the final price?",
        "How much is a {query} after the code {code}?",
        "Search for {query} and tell me the price with coupon {code}."]),
    "product_buy": ("multi_step_has_parallel", "shopping", product_buy, [
        "Find a {query}, check its stock and the shipping to {country} {zip}.",
        "Is the top {query} in stock, and what does shipping to zip {zip} in {country} cost?",
        "Search for {query}, then get its stock and a shipping quote for {country}, zip {zip}."]),
    "company_overview": ("multi_step_has_parallel", "finance", company_overview, [
        "Find the ticker of {company}, then its price and its change over the last {period}.",
        "How is {company} doing? Price and change this {period}, please.",
        "Give me the current price of {company} and how much it moved over the past {period}."]),
    "station_both": ("multi_step_has_parallel", "weather", station_both, [
        "Get the {m1} and {m2} readings from the weather station in {city}.",
        "What are the latest {m1} and {m2} values at the station in {city}?",
        "Find the weather station of {city} and read both {m1} and {m2}."]),
    "trip_flight": ("multi_step_has_parallel", "travel", trip_flight, [
        "Find the cheapest flight from {origin} to {destination} on {date}, its airline, and the cheapest {stars}-star hotel in {destination} under {max_price}.",
        "Search flights {origin} to {destination} on {date} and {stars}-star hotels there under {max_price}; who operates the cheapest flight?",
        "Plan {origin} to {destination} on {date}: cheapest flight with its airline plus the cheapest {stars}-star hotel under {max_price}."]),
    "companies_compare": ("multi_step_all_parallel", "finance", companies_compare, [
        "Which company has the higher share price, {a} or {b}?",
        "Compare the stock prices of {a} and {b}.",
        "Find the tickers of {a} and {b} and compare their prices."]),
    "stations_compare": ("multi_step_all_parallel", "weather", stations_compare, [
        "Compare the {metric} readings of the weather stations in {a} and {b}.",
        "Which city's station reports more {metric}, {a} or {b}?",
        "Get the {metric} from the weather stations of {a} and {b}."]),
    "trip_details": ("multi_step_all_parallel", "travel", trip_details, [
        "Plan a trip from {origin} to {destination} on {date}: cheapest flight and cheapest {stars}-star hotel under {max_price}, with details of both.",
        "Find the cheapest flight {origin} to {destination} on {date} and the cheapest {stars}-star hotel in {destination} under {max_price}; tell me the airline, departure time and hotel name.",
        "Book-ready info for {origin} to {destination} on {date}: details of the cheapest flight and of the cheapest {stars}-star hotel below {max_price}."]),
    "products_compare": ("multi_step_all_parallel", "shopping", products_compare, [
        "Which is rated better, the top {a} or the top {b}?",
        "Compare the ratings of {a} and {b}.",
        "Find {a} and {b} and tell me their ratings."]),
    "irr_add": ("irrelevant", None, irr_add, [
        "What is {a} plus {b}?", "Add {a} and {b} for me.", "What's the sum of {a} and {b}?"]),
    "irr_mul": ("irrelevant", None, irr_mul, [
        "What is {a} times {b}?", "Multiply {a} by {b}.", "What's the product of {a} and {b}?"]),
    "irr_letters": ("irrelevant", None, irr_letters, [
        "How many letters are in the word '{word}'?", "Count the letters in '{word}'.",
        "What is the length of the word '{word}'?"]),
    "irr_reverse": ("irrelevant", None, irr_reverse, [
        "Spell '{word}' backwards.", "What is '{word}' reversed?", "Write the word '{word}' in reverse order."]),
}
