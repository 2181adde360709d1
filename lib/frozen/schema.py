"""Check 4 of SGLS, bounded: a tool call's arguments against the tool's JSON schema (docs/method.md §5).

`Schemas().error(name, schema, arguments, turn)` is the check-4 observation, or None when the
call passes or cannot be checked for a reason of the schema's (then it is checked light). Tool
schemas are untrusted data, and so are the arguments checked against them, so the check is
bounded. Each schema is checked against its metaschema the first time it is met (within
META_STEPS keyword evaluations and META_SECONDS); `$ref`s resolve inside the schema or to a
metaschema jsonschema ships (a `referencing` registry that refuses to retrieve: no http
fetch, no file read). The calls of one turn share a budget, a `Turn` (a new one per turn): a
call's check may take MAX_STEPS keyword evaluations (deterministic), all the turn's checks
together TURN_STEPS, and SCHEMA_SECONDS of wall time from the turn's start (a backstop). A
call over its own steps gets "could not be checked ...: the check ran over its budget"; a call
over the turn's steps or past the backstop, and every later call of the turn, "...: the turn's
checks ran over their budget"; a call with more than MAX_VALUES values or an integer of more
than MAX_DIGITS digits, that reason. A turn's check-4 work is thus at most TURN_STEPS keyword
evaluations (~20 µs each here) and SCHEMA_SECONDS, however many calls it makes, plus the
metaschema check of each schema it is the first to call (once per schema in a simulator's
life). Every keyword is metered, and the draft is pinned to the root's (at a nested "$schema"
jsonschema would switch to its own, unmetered validator). `pattern`, `patternProperties` and
`additionalProperties` match with the `regex` module within PATTERN_SECONDS of matching for
the whole turn (a match still running then counts as a pass: no catastrophic backtracking);
`uniqueItems` is linear (jsonschema's compares every pair of items that do not sort). A
schema that is invalid, fails or runs out of budget in its metaschema check, or has
unevaluatedProperties with patternProperties (jsonschema matches those with `re`, unbounded)
warns once and is checked light from then on. A call jsonschema raises on (an unresolvable
`$ref`, a `$ref` loop, ...) is checked light, that call only (warned once per schema): no
failure turns check 4 off for later calls. Tests: tests/test_simulator.py.
"""
import functools
import json
import threading
import time
import warnings

import attrs  # a dependency of jsonschema: its validators are attrs classes
import jsonschema
import referencing
import referencing.exceptions
import regex  # a dependency of transformers; unlike re, its search takes a timeout

PATTERN_SECONDS = 0.2  # ours: time for all schema pattern matches of one turn's calls (catastrophic backtracking)
MAX_STEPS = 10_000     # ours: keyword evaluations in a call's schema check (shipped tools: < 100; 60 props: 1,500)
TURN_STEPS = 40_000    # ours: the same for all of a turn's calls together (20 calls of 60 props: 30,000)
SCHEMA_SECONDS = 2.0   # ours: wall-time backstop of a turn's checks; the step budgets (deterministic) end them first
META_STEPS = 100_000   # ours: the same for a tool schema's metaschema check, once per schema (22 KB schema: 16,000)
META_SECONDS = 10.0    # ours: its wall-time backstop
MAX_VALUES = 5_000     # ours: JSON values in a call's arguments that check 4 validates (flat array: 1.5 steps each)
MAX_DIGITS = 300       # ours: digits of an integer argument; past ~308 it does not fit the float multipleOf divides
BIG = 10 ** MAX_DIGITS  # the smallest integer of more than MAX_DIGITS digits


def _refuse(uri):
    raise referencing.exceptions.NoSuchResource(ref=uri)


NO_REMOTE = referencing.Registry(retrieve=_refuse)  # $refs resolve inside the schema only
_budget = threading.local()  # the running schema check's .steps left, .stop (backstop) and .regex (seconds left)
SPENT = "the turn's checks ran over their budget"


class OverBudget(Exception):
    """A schema check ran out of steps or time (raised from inside jsonschema; check 4 catches it)."""


class Turn:
    """What is left of one turn's check-4 budget: .steps (TURN_STEPS at its start), .regex (PATTERN_SECONDS of
    pattern matching) and .stop (the backstop, SCHEMA_SECONDS from its start)."""

    def __init__(self):
        self.steps, self.regex, self.stop = TURN_STEPS, PATTERN_SECONDS, time.monotonic() + SCHEMA_SECONDS


def _arm(steps, stop, regex):
    """Give this thread's next schema check its budget: `steps` keyword evaluations, until time `stop`, `regex`
    seconds of pattern matching."""
    _budget.steps, _budget.stop, _budget.regex = steps, stop, regex


def _metered(keyword):
    """jsonschema keyword function `keyword`, spending one step of the running check's budget first."""
    def run(validator, value, instance, schema):
        _budget.steps -= 1
        if _budget.steps < 0 or time.monotonic() > _budget.stop:
            raise OverBudget("the check ran over its budget")
        yield from keyword(validator, value, instance, schema) or ()
    return run


def _search(pattern, text):
    """regex.search within the running check's pattern time, which it spends: True or False, None when out of it."""
    left, start = getattr(_budget, "regex", 0), time.monotonic()
    try:
        return regex.search(pattern, text, timeout=left) is not None if left > 0 else None
    except TimeoutError:
        return None
    finally:
        _budget.regex = left - (time.monotonic() - start)


def _pattern(validator, pattern, instance, schema):
    """jsonschema's `pattern` keyword, time-bounded (a match that runs out of time passes)."""
    if validator.is_type(instance, "string") and _search(pattern, instance) is False:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    """jsonschema's `patternProperties` keyword, time-bounded (out of time: the key does not match)."""
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            for k, v in instance.items():
                if _search(pattern, k):
                    yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional_properties(validator, extra, instance, schema):
    """jsonschema's `additionalProperties` (its messages), the patternProperties matched time-bounded (out of
    time: the key matches, so it is not an additional one); extras in the instance's key order."""
    if not validator.is_type(instance, "object"):
        return
    known, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = [k for k in instance if k not in known and all(_search(p, k) is False for p in patterns)]
    if validator.is_type(extra, "object"):
        for k in extras:
            yield from validator.descend(instance[k], extra, path=k)
    elif not extra and extras:
        names = ", ".join(repr(k) for k in sorted(extras))
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            yield jsonschema.ValidationError(f"{names} {verb} not match any of the regexes: "
                                             + ", ".join(repr(p) for p in sorted(patterns)))
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield jsonschema.ValidationError(f"Additional properties are not allowed ({names} {verb} unexpected)")


def _same(value):
    """A hashable key, equal for two JSON values exactly when jsonschema's `equal` holds (1 == 1.0,
    True != 1, key order ignored). Numbers and strings key as strings, whose hashes are salted: crafted
    integers cannot collide in a set."""
    if isinstance(value, bool) or value is None:
        return "c", repr(value)
    if isinstance(value, int):
        return "n", str(value)
    if isinstance(value, float):
        return "n", str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return "s", value
    if isinstance(value, (list, tuple)):
        return "l", tuple(_same(v) for v in value)
    if isinstance(value, dict):
        return "d", tuple(sorted((k, _same(v)) for k, v in value.items()))
    return "o", repr(value)


def _unique_items(validator, unique, instance, schema):
    """jsonschema's `uniqueItems` in linear time (jsonschema compares every pair of unsortable items)."""
    if unique and validator.is_type(instance, "array"):
        seen = set()
        for item in instance:
            key = _same(item)
            if key in seen:
                yield jsonschema.ValidationError(f"{instance!r} has non-unique elements")
                return
            seen.add(key)


BOUNDED = {"pattern": _pattern, "patternProperties": _pattern_properties,
           "additionalProperties": _additional_properties, "uniqueItems": _unique_items}


@functools.cache
def _bounded(cls):
    """jsonschema validator class `cls` with every keyword metered, the BOUNDED ones replaced, and its dialect
    pinned: jsonschema's evolve switches to its own (unbounded) class at a subschema with a "$schema" of its
    own, or at a $ref into a metaschema (including the root's own $ref "#")."""
    keywords = {k: _metered(BOUNDED.get(k, f)) for k, f in cls.VALIDATORS.items()}
    bounded = jsonschema.validators.extend(cls, keywords)
    fields = [(f.name, f.alias) for f in attrs.fields(bounded) if f.init]

    def evolve(self, **changes):
        for name, alias in fields:
            changes.setdefault(alias, getattr(self, name))
        return bounded(**changes)

    bounded.evolve = evolve
    return bounded


def _validator(schema, text):
    """A bounded validator for tool schema `schema`, JSON `text` (its own draft; 2020-12 without "$schema").
    Raises when the schema fails its metaschema, that check runs over budget (jsonschema's check_schema,
    bounded), or it has unevaluatedProperties and patternProperties (strings in `text`: jsonschema matches
    those patterns with `re`, no time limit)."""
    if '"unevaluatedProperties"' in text and '"patternProperties"' in text:
        raise ValueError("unevaluatedProperties with patternProperties, whose matches have no time limit")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    meta = jsonschema.validators.validator_for(cls.META_SCHEMA, default=cls)
    _arm(META_STEPS, time.monotonic() + META_SECONDS, PATTERN_SECONDS)
    error = next(_bounded(meta)(cls.META_SCHEMA, format_checker=meta.FORMAT_CHECKER).iter_errors(schema), None)
    if error is not None:
        raise jsonschema.exceptions.SchemaError.create_from(error)
    return _bounded(cls)(schema, registry=NO_REMOTE)


def _oversize(value):
    """Why check 4 does not validate arguments `value` (too many values, too long an integer), else ""."""
    stack, n = [value], 0
    while stack:
        v = stack.pop()
        n += 1
        if n > MAX_VALUES:
            return f"they hold more than {MAX_VALUES} values"
        if isinstance(v, dict):
            stack += v.values()
        elif isinstance(v, list):
            stack += v
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= BIG:
            return f"an integer has more than {MAX_DIGITS} digits"
    return ""


class Schemas:
    """Check 4 for one simulator: a validator per schema, built (and metaschema-checked) the first time."""

    def __init__(self):
        self._validators = {}  # schema JSON -> validator, or None for an invalid schema (checked light)
        self._warned = set()  # schema JSONs warned about
        self._lock = threading.Lock()

    def error(self, name, schema, arguments, turn):
        """Check 4 of tool `name`'s call, spending `turn` (a Turn): the jsonschema violation (or why the call could
        not be checked) as a message, or None: also for an invalid schema, and for a call jsonschema itself fails
        on (that call only)."""
        try:
            key = json.dumps(schema, sort_keys=True)
        except (TypeError, ValueError, RecursionError) as e:
            return self._invalid(name, str(id(schema)), e)
        if key not in self._validators:
            try:
                self._validators[key] = _validator(schema, key)
            except Exception as e:  # any way a schema can be broken: it must not crash a rollout
                return self._invalid(name, key, e)
        validator = self._validators[key]
        if validator is None:
            return None
        unchecked = f"Tool '{name}' arguments could not be checked against its schema: "
        oversize = _oversize(arguments)
        if oversize:
            return unchecked + oversize
        if turn.steps <= 0 or time.monotonic() > turn.stop:
            return unchecked + SPENT
        steps = min(MAX_STEPS, turn.steps)
        _arm(steps, turn.stop, turn.regex)
        try:
            error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        except OverBudget as e:  # its own steps, else the turn's
            return unchecked + (str(e) if steps == MAX_STEPS and _budget.steps < 0 else SPENT)
        except Exception as e:  # an unresolvable $ref, a $ref loop, ...: this call goes unchecked, later ones not
            self._warn(key, f"tool '{name}' has an invalid JSON schema or arguments jsonschema cannot check; "
                            f"such calls are checked light only", e)
            return None
        finally:  # what this call spent, the turn has no more
            turn.steps -= steps - max(_budget.steps, 0)
            turn.regex = _budget.regex
        if error is None:
            return None
        return f"Tool '{name}' arguments do not match its schema: {error.message} at '{error.json_path}'"

    def _invalid(self, name, key, e):
        """Mark a schema invalid (checked light from now on), warning the first time; returns None."""
        with self._lock:
            self._validators[key] = None
        self._warn(key, f"tool '{name}' has an invalid JSON schema, checked light only", e)
        return None

    def _warn(self, key, text, e):
        """Warn about schema `key` once: `text` and the exception."""
        with self._lock:
            first = key not in self._warned
            self._warned.add(key)
        if first:
            warnings.warn(f"{text}: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")
