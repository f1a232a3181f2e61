#!/usr/bin/env python3
"""Writes Sources/TandemProtocol/Sun/CityTable.swift, the built-in place table of `tandem sun`,
`tandem bedtime --city` and `tandem setup --place`, from two public-domain sources:

1. The largest cities of the world (the LARGEST most populous places): Natural Earth's 1:10m
   Populated Places, as the trimmed extract Deploy/tools/data/ne_10m_populated_places.tsv that this
   repository ships (Deploy/tools/data/README.md says where it comes from). Natural Earth is in the
   public domain (https://www.naturalearthdata.com/about/terms-of-use/).
2. Each time zone's representative city, from the IANA time zone database's zone.tab and
   iso3166.tab (public domain; on Debian in /usr/share/zoneinfo, package tzdata): the fallback for a
   node without a place, and the rest of the table.

Each row: name, ISO country code, country name, latitude, longitude (degrees) and the time zone.

Time zones of the cities. A representative city of zone.tab of the place's country within 30 km
gives its zone (the tz database knows zones split off after Natural Earth's data was made:
Europe/Saratov, Asia/Barnaul, America/Ciudad_Juarez). Otherwise a place keeps Natural Earth's
TIMEZONE when it is a zone of the tz database (a backward link such as Asia/Calcutta is followed to its zone) that zone.tab or
zone1970.tab gives to the place's country; a zone.tab name of the same zone for that country is
preferred (Asia/Harbin -> Asia/Shanghai; Europe/Helsinki for Mariehamn, AX -> Europe/Mariehamn). A place
whose TIMEZONE is empty, unknown or another country's (the 4.0.0 data has Lagos in Europe/Athens)
takes the zone of the nearest place of the same country whose zone was kept, or of the nearest
zone.tab representative city of that country when that is nearer. CORRECTIONS and ZONE_NOT_FOR
below are the two hand-made exceptions.

One place per name and country: a place whose zone Natural Earth gave wins over one whose zone was
derived (4.0.0 repeats a few cities far from where they are, without a zone), then the more populous.

Names: a name with a comma keeps the part before it ("Washington, D.C." -> "Washington"), since
`--city NAME, CC` reads the last comma as the start of a country code; '|' never occurs.

Run: python3 Deploy/tools/make_city_table.py [--zoneinfo DIR] [--places TSV]
     python3 Deploy/tools/make_city_table.py --extract-from PATH/ne_10m_populated_places.dbf
       (rewrites the TSV extract from a Natural Earth shapefile's .dbf, then stops)
"""
import argparse
import math
import os
import struct
import sys
import unicodedata

LARGEST = 1000
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
EXTRACT = os.path.join(HERE, "data", "ne_10m_populated_places.tsv")
OUT = os.path.join(ROOT, "Sources", "TandemProtocol", "Sun", "CityTable.swift")
# The columns of the extract, in order (Natural Earth's names).
COLUMNS = ["NAME", "ISO_A2", "ADM0_A3", "ADM0NAME", "LATITUDE", "LONGITUDE", "POP_MAX", "TIMEZONE"]
# Natural Earth's ISO_A2 is -99 for places of countries without an ISO 3166 code of their own.
ISO_FOR_ADM0 = {"SOL": "SO", "KOS": "XK", "CYN": "CY", "KAS": "IN", "SAH": "EH", "PSX": "PS"}
# Zones Natural Earth gives to places of a country that the zone no longer serves: Europe/Simferopol
# is Crimea's (Moscow time since 2014; Natural Earth codes Crimea RU), never that of a place coded UA
# (Odesa, Kherson).
ZONE_NOT_FOR = {"Europe/Simferopol": {"UA"}}
# Places whose zone neither Natural Earth nor the nearest-city rules get right, checked by hand
# against zone.tab's comments: America/Matamoros is the zone of Tamaulipas' towns on the US border
# (US DST rules); Natural Earth gives Reynosa Monterrey's.
CORRECTIONS = {("Reynosa", "MX"): "America/Matamoros"}
EARTH_KM = 6371.0
ZONE_CITY_KM = 30.0

ARGS = argparse.ArgumentParser()
ARGS.add_argument("--zoneinfo", default="/usr/share/zoneinfo")
ARGS.add_argument("--places", default=EXTRACT)
ARGS.add_argument("--extract-from", default=None, metavar="DBF")
OPTS = ARGS.parse_args()
ZONEINFO = OPTS.zoneinfo


# --- The extract -----------------------------------------------------------------------------

def read_dbf(path):
    """The records of a dBASE III file (a shapefile's attributes) as dicts of strings."""
    with open(path, "rb") as f:
        header = f.read(32)
        count, header_length, record_length = struct.unpack("<IHH", header[4:12])
        fields = []
        while True:
            d = f.read(32)
            if d[0] == 0x0D:
                break
            fields.append((d[:11].split(b"\0")[0].decode("ascii"), d[16]))
        f.seek(header_length)
        rows = []
        for _ in range(count):
            record = f.read(record_length)
            if record[:1] == b"*":          # deleted
                continue
            at, row = 1, {}
            for name, length in fields:
                row[name] = record[at:at + length].decode("utf-8").strip()
                at += length
            rows.append(row)
        return rows


def write_extract(dbf, out):
    rows = read_dbf(dbf)
    for r in rows:
        r["LATITUDE"] = f"{float(r['LATITUDE']):.6f}"
        r["LONGITUDE"] = f"{float(r['LONGITUDE']):.6f}"
        r["POP_MAX"] = str(int(float(r["POP_MAX"] or 0)))
    rows.sort(key=lambda r: (-int(r["POP_MAX"]), r["NAME"], r["ISO_A2"], r["LATITUDE"]))
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        f.write("\t".join(COLUMNS) + "\n")
        for r in rows:
            values = [r[c].replace("\t", " ").replace("\n", " ") for c in COLUMNS]
            f.write("\t".join(values) + "\n")
    print(f"{len(rows)} places -> {out}")


def read_extract(path):
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        if header != COLUMNS:
            sys.exit(f"{path}: expected columns {COLUMNS}, found {header}")
        return [dict(zip(COLUMNS, line.rstrip("\n").split("\t"))) for line in f if line.strip()]


# --- The tz database -------------------------------------------------------------------------

def coordinate(text, degree_digits):
    sign = -1 if text[0] == "-" else 1
    digits = text[1:]
    d = int(digits[:degree_digits])
    m = int(digits[degree_digits:degree_digits + 2])
    s = int(digits[degree_digits + 2:degree_digits + 4] or 0)
    return sign * (d + m / 60 + s / 3600)


def split_iso6709(text):
    for i in range(1, len(text)):
        if text[i] in "+-":
            return coordinate(text[:i], 2), coordinate(text[i:], 3)
    raise ValueError(text)


def tab_rows(name):
    with open(os.path.join(ZONEINFO, name), encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            yield line.rstrip("\n").split("\t")


class TZ:
    def __init__(self):
        self.countries = {code: name for code, name, *_ in tab_rows("iso3166.tab")}
        # zone.tab: one row per country and zone (the zone cities of the table).
        self.zone_tab = []
        for code, coords, zone, *_ in tab_rows("zone.tab"):
            lat, lon = split_iso6709(coords)
            self.zone_tab.append((code, lat, lon, zone))
        # Links (backward names) to the zones they name.
        self.links = {}
        zi = os.path.join(ZONEINFO, "tzdata.zi")
        if os.path.exists(zi):
            with open(zi, encoding="utf-8") as f:
                for line in f:
                    p = line.split()
                    if len(p) == 3 and p[0] == "L":
                        self.links[p[2]] = p[1]
        # The countries each zone serves: zone.tab's and zone1970.tab's (keyed by resolved zone).
        self.served = {}
        for code, _, _, zone in self.zone_tab:
            self.served.setdefault(self.resolve(zone), set()).add(code)
        for codes, _, zone, *_ in tab_rows("zone1970.tab"):
            self.served.setdefault(self.resolve(zone), set()).update(codes.split(","))

    def resolve(self, zone):
        seen = set()
        while zone in self.links and zone not in seen:
            seen.add(zone)
            zone = self.links[zone]
        return zone

    def exists(self, zone):
        return bool(zone) and ".." not in zone and os.path.isfile(os.path.join(ZONEINFO, zone))

    def for_country(self, zone, country):
        """`zone` as the name to ship for a place in `country`, or None when it is not a zone of
        that country."""
        if not self.exists(zone):
            return None
        target = self.resolve(zone)
        if country not in self.served.get(target, set()) or country in ZONE_NOT_FOR.get(target, set()):
            return None
        for code, _, _, z in self.zone_tab:
            if code == country and self.resolve(z) == target:
                return z
        return target


def distance(lat1, lon1, lat2, lon2):
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * math.asin(min(1.0, math.sqrt(a)))


def fold(name):
    return "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c)).casefold()


def places(tz):
    """Every place of the extract that has a zone, once per name and country, as (name, cc,
    country, lat, lon, zone, population, whether the zone was derived), most populous first."""
    out = []
    for r in read_extract(OPTS.places):
        name = r["NAME"].split(",")[0].replace("|", " ").strip()
        cc = r["ISO_A2"] if len(r["ISO_A2"]) == 2 else ISO_FOR_ADM0.get(r["ADM0_A3"], "")
        if not name or not cc:
            continue
        lat, lon = float(r["LATITUDE"]), float(r["LONGITUDE"])
        out.append([name, cc, tz.countries.get(cc, r["ADM0NAME"] or cc), lat, lon,
                    tz.for_country(r["TIMEZONE"], cc), int(r["POP_MAX"]), False])
    kept = {}
    for p in out:
        if p[5]:
            kept.setdefault(p[1], []).append((p[3], p[4], p[5]))
    for p in out:
        if (p[0], p[1]) in CORRECTIONS:
            p[5] = CORRECTIONS[(p[0], p[1])]
            continue
        # The tz database's own city of a zone, within 30 km, decides (it knows the zones
        # created since Natural Earth's data: Europe/Saratov, Asia/Barnaul, America/Ciudad_Juarez).
        near = [(distance(p[3], p[4], la, lo), z) for c, la, lo, z in tz.zone_tab if c == p[1]]
        near = [n for n in near if n[0] * EARTH_KM <= ZONE_CITY_KM]
        if near:
            p[5] = min(near)[1]
            continue
        if p[5]:
            continue
        candidates = kept.get(p[1], []) + [(la, lo, z) for c, la, lo, z in tz.zone_tab if c == p[1]]
        if not candidates:
            continue
        p[5] = min(candidates, key=lambda c: distance(p[3], p[4], c[0], c[1]))[2]
        p[7] = True
    # One place per name and country: a place whose zone Natural Earth gave before one whose zone
    # was derived (the 4.0.0 data repeats a few cities, far from where they are and without a zone:
    # Mazatlán, Natal, Vila Velha), then the more populous.
    out = [p for p in out if p[5]]
    out.sort(key=lambda p: (p[7], -p[6], p[0], p[1]))
    seen, unique = set(), []
    for p in out:
        key = (fold(p[0]), p[1])
        if key not in seen:
            seen.add(key)
            unique.append(tuple(p))
    unique.sort(key=lambda p: (-p[6], p[0], p[1]))
    return unique


def main():
    if OPTS.extract_from:
        write_extract(OPTS.extract_from, OPTS.places)
        return
    tz = TZ()
    zone_rows = []
    for code, lat, lon, zone in tz.zone_tab:
        name = zone.split("/")[-1].replace("_", " ")
        zone_rows.append((name, code, tz.countries.get(code, code), lat, lon, zone))
    zone_rows.sort(key=lambda r: (r[0].lower(), r[1]))
    all_places = places(tz)
    derived = sum(1 for p in all_places[:LARGEST] if p[7])
    cities = [p[:6] for p in all_places[:LARGEST]]
    smallest = all_places[LARGEST - 1][6]

    def line(r):
        n, c, cn, la, lo, z = r
        return f"{n}|{c}|{cn}|{la:.4f}|{lo:.4f}|{z}".replace("\\", "\\\\").replace('"', '\\"')

    with open(OUT, "w", encoding="utf-8") as out:
        out.write("// Generated by Deploy/tools/make_city_table.py. Do not edit: run the script again.\n")
        out.write(f"// builtInCityRows: the {len(cities)} most populous places (POP_MAX, metropolitan, at least {smallest:,}) of\n")
        out.write("// Natural Earth's 1:10m Populated Places (public domain, https://www.naturalearthdata.com),\n")
        out.write("// largest first; extract and its version: Deploy/tools/data/README.md.\n")
        out.write("// builtInZoneRows: each time zone's representative city, from the IANA time zone database's\n")
        out.write("// zone.tab and iso3166.tab (public domain).\n")
        out.write("// name|country code|country|latitude|longitude|time zone\n\n")
        out.write("extension PlaceTable {\n    static let builtInCityRows = \"\"\"\n")
        for r in cities:
            out.write("        " + line(r) + "\n")
        out.write("        \"\"\"\n\n    static let builtInZoneRows = \"\"\"\n")
        for r in zone_rows:
            out.write("        " + line(r) + "\n")
        out.write("        \"\"\"\n}\n")
    print(f"{len(cities)} cities and {len(zone_rows)} zone cities -> {os.path.normpath(OUT)} "
          f"({derived} of the cities with a derived zone)")


if __name__ == "__main__":
    main()
