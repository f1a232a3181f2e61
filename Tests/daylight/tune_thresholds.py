"""Chooses the daylight check's thresholds on a training set's scores.

    tandem-bench daylight --report TRAIN_DIR --scores > train.json
    python Tests/daylight/tune_thresholds.py train.json

For each check, and separately for blue and grey skies, the accept bound ("borderline" in
DaylightThresholds.swift) starts a quarter of the daylight photos' spread outside all of them, and is
then tightened greedily, each time halfway between a non-daylight photo and the nearest daylight
one past it — the check and step that
turn away the most accepted non-daylight photos per daylight photo lost — until no non-daylight
training photo is accepted or the false rejects would pass the budget. The "reject" bound is then
put outside the accept bound by the margin below (between the two a photo is ambiguous). Prints the
bounds to copy into DaylightThresholds.swift and the training set's per-class result under them.
"""

from __future__ import annotations

import argparse
import json
import sys

# (score, at_least, Swift key path): the checks of DaylightThresholds.standard, in this order.
CHECKS = [
    ("top_brightness", True, "topBrightness"),
    ("colour_temperature", True, "colourTemperature"),
    ("warm_sky_share", False, "warmSkyShare"),
    ("top_edge_dark_share", False, "topEdgeDarkShare"),
    ("sky_ground_difference", True, "skyGroundDifference"),
    ("bottom_blue_share", False, "bottomBlueShare"),
    ("sky_share", True, "skyShare"),
    ("sky_ground_contrast", True, "skyGroundContrast"),
    ("chroma_ripple", False, "chromaRipple"),
    ("top_saturation", False, "topSaturation"),
    ("daylight_evidence", True, "evidence"),
]
# DaylightScores.evidence: these scores, scaled per route by the daylight photos' (p10, median).
EVIDENCE = [("top_brightness", "topBrightness"), ("sky_ground_contrast", "skyGroundContrast"),
            ("sky_ground_difference", "skyGroundDifference"), ("colour_temperature", "colourTemperature")]


def evidence_scale(photos):
    pos = [p for p in photos if p["class"] in DAYLIGHT]
    scale = {}
    for name, _ in EVIDENCE:
        for r in ROUTES:
            values = sorted(p["scores"][name] for p in pos if route(p["scores"]) == r) or [0.0, 1.0]
            scale[(name, r)] = (values[int(0.1 * (len(values) - 1))], values[int(0.5 * (len(values) - 1))])
    return scale


def add_evidence(photos, scale):
    for p in photos:
        r = route(p["scores"])
        total = 0.0
        for name, _ in EVIDENCE:
            lo, hi = scale[(name, r)]
            v = (p["scores"][name] - lo) / (hi - lo) if hi > lo else 0.0
            total += min(1.0, max(-3.0, v))
        p["scores"]["daylight_evidence"] = total / len(EVIDENCE)
ROUTES = ("blue", "grey")
BLUE_ROUTE = 0.5  # DaylightThresholds.blueRoute


def route(scores):
    return "blue" if scores["blue_sky_share"] >= BLUE_ROUTE else "grey"
DAYLIGHT = {"clear", "overcast"}


def accepted(scores, bounds):
    r = route(scores)
    for name, at_least, _ in CHECKS:
        v, b = scores[name], bounds[(name, r)]
        if (v < b) if at_least else (v > b):
            return False
    return True


def evaluate(photos, bounds):
    per = {}
    for p in photos:
        ok = accepted(p["scores"], bounds)
        row = per.setdefault(p["class"], [0, 0])
        row[0] += 1
        row[1] += ok
    return per


def summary(per):
    pos = sum(n for c, (n, _) in per.items() if c in DAYLIGHT)
    fr = sum(n - a for c, (n, a) in per.items() if c in DAYLIGHT)
    neg = sum(n for c, (n, _) in per.items() if c not in DAYLIGHT)
    fa = sum(a for c, (n, a) in per.items() if c not in DAYLIGHT)
    return pos, fr, neg, fa


def spreads(pos):
    """Per check and route: the daylight photos' 10-90 % spread."""
    out = {}
    for name, _, _ in CHECKS:
        for r in ROUTES:
            values = sorted(p["scores"][name] for p in pos if route(p["scores"]) == r) or [0.0]
            out[(name, r)] = values[int(0.9 * (len(values) - 1))] - values[int(0.1 * (len(values) - 1))]
    return out


def nudged(photo, spread, safety):
    """A non-daylight photo with every score moved `safety` of the spread toward daylight: the
    bounds must turn this away too, so a slightly different photo of the same kind is not let in."""
    r = route(photo["scores"])
    scores = dict(photo["scores"])
    for name, at_least, _ in CHECKS:
        d = safety * spread[(name, r)]
        scores[name] = scores[name] + d if at_least else scores[name] - d
    return {"class": photo["class"], "scores": scores}


def tune(photos, fr_budget, safety=0.0):
    pos = [p for p in photos if p["class"] in DAYLIGHT]
    spread = spreads(pos)
    neg = [nudged(p, spread, safety) for p in photos if p["class"] not in DAYLIGHT]
    bounds = {}
    for name, at_least, _ in CHECKS:
        for r in ROUTES:
            values = sorted(p["scores"][name] for p in pos if route(p["scores"]) == r) or [0.0]
            spread = values[int(0.9 * (len(values) - 1))] - values[int(0.1 * (len(values) - 1))]
            margin = max(0.25 * spread, 0.01 + 0.01 * abs(values[0 if at_least else -1]))
            bounds[(name, r)] = values[0] - margin if at_least else values[-1] + margin
    while True:
        acc_neg = [p for p in neg if accepted(p["scores"], bounds)]
        if not acc_neg:
            break
        acc_pos = [p for p in pos if accepted(p["scores"], bounds)]
        best = None
        for name, at_least, _ in CHECKS:
          for r in ROUTES:
            key_ = (name, r)
            # Candidate bounds: just past each accepted negative's value on this check.
            for q in acc_neg:
                if route(q["scores"]) != r:
                    continue
                v = q["scores"][name]
                # Halfway between the negative and the nearest accepted daylight photo past it
                # (a margin on both sides), or just past the negative when none is near.
                if at_least:
                    beyond = [p["scores"][name] for p in acc_pos if route(p["scores"]) == r and p["scores"][name] > v]
                    cand = (v + min(beyond)) / 2 if beyond else v + 1e-9
                else:
                    beyond = [p["scores"][name] for p in acc_pos if route(p["scores"]) == r and p["scores"][name] < v]
                    cand = (v + max(beyond)) / 2 if beyond else v - 1e-9
                if (at_least and cand <= bounds[key_]) or (not at_least and cand >= bounds[key_]):
                    continue
                trial = dict(bounds)
                trial[key_] = cand
                lost = sum(1 for p in acc_pos if not accepted(p["scores"], trial))
                gained = sum(1 for p in acc_neg if not accepted(p["scores"], trial))
                if len(pos) - len(acc_pos) + lost > fr_budget * len(pos):
                    continue
                key = (gained / (lost + 0.5), -lost)
                if best is None or key > best[0]:
                    best = (key, key_, cand)
        if best is None:
            break
        bounds[best[1]] = best[2]
    return bounds


def fmt(v):
    return f"{v:.6g}" if abs(v) < 100 else f"{v:.0f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", help="tandem-bench daylight --report DIR --scores output")
    ap.add_argument("--fr-budget", type=float, default=0.04, help="false rejects allowed on training (fraction)")
    ap.add_argument("--margin", type=float, default=0.15, help="reject bound = accept bound moved out by this share of the daylight photos' spread")
    ap.add_argument("--safety", type=float, default=0.15, help="non-daylight photos are nudged this share of the spread toward daylight while tuning")
    ap.add_argument("--check", help="another report (a validation set): its per-class result under the chosen bounds")
    ap.add_argument("--write", help="DaylightThresholds.swift: replace its tuned list")
    args = ap.parse_args(argv)
    photos = [p for p in json.load(open(args.report))["photos"] if "scores" in p]
    scale = evidence_scale(photos)
    add_evidence(photos, scale)
    bounds = tune(photos, args.fr_budget, args.safety)
    pos = [p for p in photos if p["class"] in DAYLIGHT]
    lines = []
    for name, at_least, path in CHECKS:
        pair = {}
        for r in ROUTES:
            values = sorted(p["scores"][name] for p in pos if route(p["scores"]) == r) or [0.0]
            spread = values[int(0.9 * (len(values) - 1))] - values[int(0.1 * (len(values) - 1))]
            b = bounds[(name, r)]
            reject = b - args.margin * spread if at_least else b + args.margin * spread
            pair[r] = (fmt(reject), fmt(b))
        lines.append(f'        check("{name}", \\.{path}, atLeast: {str(at_least).lower()}, '
                     f'blue: ({pair["blue"][0]}, {pair["blue"][1]}), grey: ({pair["grey"][0]}, {pair["grey"][1]})),')
    block = "    static let standard = DaylightThresholds(checks: [\n" + "\n".join(lines) + "\n    ])\n"
    parts = []
    for name, path in EVIDENCE:
        b, g = scale[(name, "blue")], scale[(name, "grey")]
        parts.append(f"{path}: (blue: ({fmt(b[0])}, {fmt(b[1])}), grey: ({fmt(g[0])}, {fmt(g[1])}))")
    block += "    static let evidenceScale = EvidenceScale(" + ",\n                                             ".join(parts) + ")\n"
    print(block)
    if args.write:
        text = open(args.write).read()
        a = text.index("// BEGIN TUNED")
        a = text.index("\n", a) + 1
        z = text.index("    // END TUNED")
        open(args.write, "w").write(text[:a] + block + text[z:])
    per = evaluate(photos, bounds)
    for c, (n, a) in sorted(per.items()):
        print(f"  {c:12s} {n:4d} accepted {a:4d}")
    pos_n, fr, neg_n, fa = summary(per)
    print(f"training: false rejects {fr}/{pos_n}, false accepts {fa}/{neg_n}", file=sys.stderr)
    if args.check:
        other = [p for p in json.load(open(args.check))["photos"] if "scores" in p]
        add_evidence(other, scale)
        per = evaluate(other, bounds)
        for c, (n, a) in sorted(per.items()):
            print(f"  check {c:12s} {n:4d} accepted {a:4d}", file=sys.stderr)
        pos_n, fr, neg_n, fa = summary(per)
        print(f"check: false rejects {fr}/{pos_n}, false accepts {fa}/{neg_n}", file=sys.stderr)


if __name__ == "__main__":
    main()
