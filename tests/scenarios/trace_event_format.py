"""A checker of Chrome's Trace Event Format, written from the format's documented rules.

Rules (the Trace Event Format document; Perfetto's notes on JSON traces):

Times are compared in whole nanoseconds, as Perfetto imports them (`ts` and `dur` each
rounded from microseconds), so float noise in `ts + dur` is no overlap.

- The file is a JSON object with a `traceEvents` array (or a bare array);
  `displayTimeUnit`, if given, is "ms" or "ns".
- Every event is an object with a string `ph` of a known phase, `pid` and `tid` (integers
  or strings) and, except metadata, a string `name` and a number `ts` (microseconds).
  `cat` is a string and `args` an object when present.
- "X" (complete) has a number `dur` >= 0; "B"/"E" pair up per thread, last in first out.
  Perfetto also requires the slices of one thread to nest: two may not partially overlap.
- "i"/"I" (instant): scope `s` is "g", "p" or "t" when present.
- "C" (counter): `args` is a non-empty object of numbers.
- "b"/"e"/"n" (async): a `cat` and an `id` (or `id2`); every "b" is closed by one "e" of
  the same category, id and name, not earlier.
- "s"/"t"/"f" (flow): a `cat` and an `id`; each (cat, name, id) has exactly one "s" and
  one "f", the "f" not earlier; `bp` is "e" when present. A flow event binds to the
  slice of its thread that encloses its timestamp ("s", and "f" with bp "e"): there must be one.
- "M" (metadata): `name` is one of process_name, process_labels, process_sort_index,
  thread_name, thread_sort_index; names carry `args.name` (a string), sort indexes
  `args.sort_index` (an integer).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

PHASES = set("BEXiICbnesStfPOND") | {"M", "R"}
METADATA = {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _ns(microseconds: float) -> int:
    return round(microseconds * 1000)


def check_trace_events(trace: Any) -> list[str]:
    """Every rule the trace breaks, as messages naming the event's index (empty: valid)."""
    if isinstance(trace, dict):
        events = trace.get("traceEvents")
        if trace.get("displayTimeUnit", "ms") not in ("ms", "ns"):
            return [f"displayTimeUnit {trace['displayTimeUnit']!r} is not 'ms' or 'ns'"]
    else:
        events = trace
    if not isinstance(events, list):
        return ["no traceEvents array"]
    errors: list[str] = []
    stacks: dict[tuple[Any, Any], list[str]] = defaultdict(list)
    slices: dict[tuple[Any, Any], list[tuple[int, int]]] = defaultdict(list)
    async_open: dict[tuple[Any, Any, Any], list[float]] = defaultdict(list)
    flows: dict[tuple[Any, Any, Any], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for i, event in enumerate(events):
        where = f"event {i}"
        if not isinstance(event, dict):
            errors.append(f"{where}: not an object")
            continue
        ph = event.get("ph")
        if not isinstance(ph, str) or ph not in PHASES:
            errors.append(f"{where}: unknown phase {ph!r}")
            continue
        for key in ("pid", "tid"):
            if key not in event or not _id(event[key]):
                errors.append(f"{where}: '{key}' missing or not an integer or string")
        if "cat" in event and not isinstance(event["cat"], str):
            errors.append(f"{where}: 'cat' is not a string")
        if "args" in event and not isinstance(event["args"], dict):
            errors.append(f"{where}: 'args' is not an object")
        if ph == "M":
            if event.get("name") not in METADATA:
                errors.append(f"{where}: unknown metadata {event.get('name')!r}")
            elif event["name"].endswith("_name") and not isinstance(event.get("args", {}).get("name"), str):
                errors.append(f"{where}: {event['name']} without args.name")
            elif event["name"].endswith("_sort_index") and not isinstance(event.get("args", {}).get("sort_index"), int):
                errors.append(f"{where}: {event['name']} without an integer args.sort_index")
            continue
        if not isinstance(event.get("name"), str):
            errors.append(f"{where}: 'name' missing or not a string")
        if not _number(event.get("ts")) or event["ts"] < 0:
            errors.append(f"{where}: 'ts' missing or not a number >= 0")
            continue
        thread = (event.get("pid"), event.get("tid"))
        ts = event["ts"]
        if ph == "X":
            if not _number(event.get("dur")) or event["dur"] < 0:
                errors.append(f"{where}: complete event without a number 'dur' >= 0")
            else:
                slices[thread].append((_ns(ts), _ns(ts) + _ns(event["dur"])))
        elif ph == "B":
            stacks[thread].append(event.get("name"))
        elif ph == "E":
            if not stacks[thread]:
                errors.append(f"{where}: 'E' without a 'B' on its thread")
            else:
                stacks[thread].pop()
        elif ph in ("i", "I"):
            if event.get("s", "t") not in ("g", "p", "t"):
                errors.append(f"{where}: instant scope {event.get('s')!r} is not g, p or t")
        elif ph == "C":
            args = event.get("args")
            if not isinstance(args, dict) or not args or not all(_number(v) for v in args.values()):
                errors.append(f"{where}: counter without a non-empty args object of numbers")
        elif ph in ("b", "e", "n"):
            if not isinstance(event.get("cat"), str) or not (_id(event.get("id")) or "id2" in event):
                errors.append(f"{where}: async event without 'cat' and 'id'")
                continue
            key = (event["cat"], event.get("id", str(event.get("id2"))), event["name"])
            if ph == "b":
                async_open[key].append(ts)
            elif ph == "e":
                if not async_open[key]:
                    errors.append(f"{where}: async end {key} without a begin")
                elif async_open[key].pop() > ts:
                    errors.append(f"{where}: async end {key} before its begin")
        elif ph in ("s", "t", "f"):
            if not isinstance(event.get("cat"), str) or not _id(event.get("id")):
                errors.append(f"{where}: flow event without 'cat' and 'id'")
                continue
            if "bp" in event and event["bp"] != "e":
                errors.append(f"{where}: flow binding point {event['bp']!r} is not 'e'")
            flows[event["cat"], event["name"], event["id"]][ph].append(event)
    for thread, stack in stacks.items():
        if stack:
            errors.append(f"thread {thread}: {len(stack)} 'B' events never ended")
    for key, opened in async_open.items():
        if opened:
            errors.append(f"async {key}: {len(opened)} begins never ended")
    for thread, spans in slices.items():
        spans.sort(key=lambda span: (span[0], -span[1]))
        open_ends: list[int] = []
        for start, end in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1]:
                errors.append(f"thread {thread}: slice [{start}, {end}] partially overlaps one ending at {open_ends[-1]}")
            open_ends.append(end)
    for key, phases in flows.items():
        starts, ends = phases.get("s", []), phases.get("f", [])
        if len(starts) != 1 or len(ends) != 1:
            errors.append(f"flow {key}: {len(starts)} starts and {len(ends)} ends (need one each)")
            continue
        if ends[0]["ts"] < starts[0]["ts"]:
            errors.append(f"flow {key}: ends before it starts")
        for flow in (starts[0], ends[0]):
            if flow["ph"] == "f" and flow.get("bp") != "e":
                continue
            thread = (flow["pid"], flow["tid"])
            if not any(start <= _ns(flow["ts"]) <= end for start, end in slices.get(thread, [])):
                errors.append(f"flow {key}: its '{flow['ph']}' at {flow['ts']} is inside no slice of its thread")
    return errors
