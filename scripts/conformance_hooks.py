"""Schemathesis hooks for scripts/conformance: rules across fields that an OpenAPI document
cannot state (JSON Schema has no arithmetic across fields, and each query parameter has a
schema of its own), so the generator is told them here. Each rule is also written in the
document, in the description of the field it names, and the server refuses a request that
breaks it with a 400 naming that field.

Loaded through SCHEMATHESIS_HOOKS by scripts/conformance. The coverage, fuzzing and
stateful phases pass every case through `filter_case`; the examples phase through
`before_add_examples`.
"""

from datetime import datetime, timedelta, timezone

import schemathesis

MAX_TOTAL = 2**53 - 1


def _time(raw):
    if not isinstance(raw, str):
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _audit_range_ok(query):
    """GET /api/v1/audit[.csv]: `to` must be after `from`."""
    if not isinstance(query, dict):
        return True
    start, end = _time(query.get("from")), _time(query.get("to"))
    return start is None or end is None or end > start


def _usage_range_ok(query):
    """GET /api/v1/tenants/{tenant}/usage[.csv]: `to` (default now) after `from` (default
    the start of the current UTC month), at most 400 days later."""
    if not isinstance(query, dict):
        return True
    now = datetime.now(timezone.utc)
    start = _time(query.get("from")) if "from" in query else now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = _time(query.get("to")) if "to" in query else now
    if start is None or end is None:
        return True
    # Margins of a minute: the server's clock runs on while the case travels.
    return end - start > timedelta(minutes=1) and end - start < timedelta(days=400)


def _outcomes_ok(body):
    """POST /api/v1/channels/{code}/outcomes: `latency_count` plus the latencies listed in
    `latencies_ms` ≤ `ok + fail` and ≤ 10,000, a `latency_ms_sum` above 0 needs a
    `latency_count` of at least 1 (the listed latencies count apart), and the sum with the
    listed latencies stays at most 10^9 ms."""
    if not isinstance(body, dict):
        return True
    numbers = {k: body.get(k) for k in ("ok", "fail", "latency_ms_sum", "latency_count")}
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in numbers.values()):
        return True
    listed = body.get("latencies_ms") or []
    whole = lambda v: isinstance(v, int) or (isinstance(v, float) and v.is_integer())
    if not isinstance(listed, list) or not all(whole(v) and not isinstance(v, bool) for v in listed):
        return True
    ok, fail = numbers["ok"] or 0, numbers["fail"] or 0
    total = (numbers["latency_ms_sum"] or 0) + sum(listed)
    count = (numbers["latency_count"] or 0) + len(listed)
    summed_alone = (numbers["latency_ms_sum"] or 0) > 0 and (numbers["latency_count"] or 0) == 0
    return count <= ok + fail and count <= 10_000 and not summed_alone and total <= 1_000_000_000


def _weights_ok(entries):
    """A weights list: members unique, at least one weight above 0, the total at most
    2^53 − 1."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return True
    members = [e.get("member") for e in entries]
    weights = [e.get("weight") for e in entries]
    if not all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights):
        return True
    if len(set(map(repr, members))) != len(members):
        return False
    return any(w > 0 for w in weights) and sum(weights) <= MAX_TOTAL


def _seconds(raw):
    parts = raw.split(":") if isinstance(raw, str) else []
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
        return None
    return sum(int(p) * m for p, m in zip(parts, (3600, 60, 1)))


def _windows_ok(body):
    """A pool's peak windows: `end` not equal to `start`."""
    lists = []
    for holder in (body, body.get("snapshot"), body.get("operation"), body.get("candidate")):
        if isinstance(holder, dict) and isinstance(holder.get("peak_windows"), list):
            lists.append(holder["peak_windows"])
    for windows in lists:
        for w in windows:
            if isinstance(w, dict):
                start, end = _seconds(w.get("start")), _seconds(w.get("end"))
                if start is not None and start == end:
                    return False
    return True


def _all_weights_ok(body):
    """Every weights list of a body: `weights`, each peak window's, a snapshot's and its
    tiers', a change request's operation's, a replay's candidate's, a ramp plan's target
    and steps' (direct or in a change request)."""
    if not isinstance(body, dict):
        return True
    lists = []
    operation = body.get("operation") if isinstance(body.get("operation"), dict) else {}
    for plan in (body.get("plan"), operation.get("plan")):
        if isinstance(plan, dict):
            lists.append(plan.get("target"))
            steps = plan.get("steps")
            if isinstance(steps, list):
                lists.extend(step.get("weights") for step in steps if isinstance(step, dict))
    for holder in (body, body.get("snapshot"), body.get("operation"), body.get("candidate")):
        if not isinstance(holder, dict):
            continue
        lists.append(holder.get("weights"))
        tiers = holder.get("tiers")
        if isinstance(tiers, dict):
            lists.extend(tiers.values())
        windows = holder.get("peak_windows")
        if isinstance(windows, list):
            lists.extend(w.get("weights") for w in windows if isinstance(w, dict))
    return all(_weights_ok(entries) for entries in lists if entries is not None)


def _grant_ok(body):
    """POST /api/v1/tenants/{tenant}/grants: `expires_at` after `starts_at`."""
    if not isinstance(body, dict):
        return True
    start, end = _time(body.get("starts_at")), _time(body.get("expires_at"))
    return start is None or end is None or end > start


def _tier_policy_ok(body):
    """PUT /api/v1/pools/{pool}/tier_policy: `normal_at_least` below `good_at_least` by at
    least twice `margin`, `good_at_least + margin` at most 1 and `normal_at_least` above
    `margin` (each left out takes its default: 0.8, 0.95, 0.02)."""
    policy = body.get("policy") if isinstance(body, dict) else None
    if not isinstance(policy, dict):
        return True
    values = [policy.get(k, d) for k, d in (("normal_at_least", 0.8), ("good_at_least", 0.95), ("margin", 0.02))]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return True
    normal, good, margin = values
    return normal + 2 * margin <= good and good + margin <= 1 and normal - margin > 0


def _replay_ok(body):
    """POST /api/v1/pools/{pool}/replay: `to` after `from`; `weights` or `candidate`, not
    both."""
    if not isinstance(body, dict):
        return True
    start, end = _time(body.get("from")), _time(body.get("to"))
    if start is not None and end is not None and end <= start:
        return False
    return body.get("weights") is None or body.get("candidate") is None


def _bindings_ok(body, scope=None):
    """A token's bindings: `*` stands alone in its list, and only a dataplane token is
    bound (an admin- or metrics-scope token takes no lists but `["*"]`)."""
    if not isinstance(body, dict):
        return True
    lists = [body.get(k) for k in ("tenants", "pools", "routes", "channels") if k in body]
    if any(isinstance(l, list) and "*" in l and len(l) > 1 for l in lists):
        return False
    if scope is not None and scope != "dataplane":
        return all(l is None or l == ["*"] for l in lists)
    return True


def _case_ok(case):
    path = case.operation.path
    if path == "/api/v1/tokens" and case.method.upper() == "POST":
        return _bindings_ok(case.body, case.body.get("scope") if isinstance(case.body, dict) else None)
    if path == "/api/v1/tokens/{id}/bindings":
        return _bindings_ok(case.body)
    if path in ("/api/v1/audit", "/api/v1/audit.csv"):
        return _audit_range_ok(case.query)
    if path in ("/api/v1/tenants/{tenant}/usage", "/api/v1/tenants/{tenant}/usage.csv"):
        return _usage_range_ok(case.query)
    if path == "/api/v1/channels/{code}/outcomes":
        return _outcomes_ok(case.body)
    if path == "/api/v1/changes" and case.method.upper() == "GET" and isinstance(case.query, dict):
        # `pool` and `entity` filter the same thing: one of them at most.
        if case.query.get("pool") is not None and case.query.get("entity") is not None:
            return False
    if path == "/api/v1/changes" and case.method.upper() == "POST" and isinstance(case.body, dict):
        # Exactly one of `pool` and `entity` names what the request changes.
        if ("pool" in case.body and case.body["pool"] is not None) == (
            "entity" in case.body and case.body["entity"] is not None
        ):
            return False
    if path == "/api/v1/pools/{pool}/tier_policy":
        return _tier_policy_ok(case.body)
    if path == "/api/v1/pools/{pool}/replay" and not _replay_ok(case.body):
        return False
    if path.startswith("/api/v1/pools/") or path in ("/api/v1/changes", "/api/v1/changes/{id}"):
        return _all_weights_ok(case.body) and (not isinstance(case.body, dict) or _windows_ok(case.body))
    if path == "/api/v1/tenants/{tenant}/grants":
        return _grant_ok(case.body)
    return True


@schemathesis.hook
def filter_case(context, case):
    return _case_ok(case)


@schemathesis.hook
def before_add_examples(context, examples):
    # The examples phase takes its cases from here, not through `filter_case`.
    examples[:] = [case for case in examples if _case_ok(case)]
