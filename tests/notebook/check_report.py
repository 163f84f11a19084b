#!/usr/bin/env python3
"""tests/notebook/check_report.py: parses notebook reports: SVG plots with xml.etree, the HTML report's DOM with html.parser.

  check_report.py svg FILE.svg [MIN_POLYLINES]   well-formed SVG root with axes, tick labels and polylines
  check_report.py html FILE.html MIN_PLOTS       inline <svg> plots with polylines, no external resources
"""
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

SVG = "{http://www.w3.org/2000/svg}"


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check_svg(path, min_lines):
    root = ET.parse(path).getroot()  # raises on malformed XML
    if root.tag != SVG + "svg":
        fail(f"{path}: root is {root.tag}, not svg")
    lines = root.findall(f".//{SVG}polyline")
    if len(lines) < min_lines:
        fail(f"{path}: {len(lines)} polylines, expected >= {min_lines}")
    for pl in lines:
        pts = pl.get("points", "").split()
        if len(pts) < 2:
            fail(f"{path}: a polyline with {len(pts)} points")
        for p in pts:
            x, y = (float(v) for v in p.split(","))
            if not (0 <= x <= float(root.get("width")) and 0 <= y <= float(root.get("height"))):
                fail(f"{path}: point {p} outside the canvas")
    texts = ["".join(t.itertext()) for t in root.iter(SVG + "text")]
    if len(texts) < 6:
        fail(f"{path}: only {len(texts)} text labels (ticks, axis labels)")
    if min_lines > 1 and root.find(f".//{SVG}g[@class='legend']") is None:
        fail(f"{path}: several series but no legend")
    print(f"{path}: ok ({len(lines)} polylines, {len(texts)} labels)")


class Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.svgs, self.external, self.pre = [], [], [], 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self.svgs.append(0)
        if tag == "polyline" and self.svgs:
            self.svgs[-1] += 1
        if tag == "pre":
            self.pre += 1
        for k in ("src", "href"):
            v = a.get(k) or ""
            if tag in ("script", "link", "img", "iframe") or (k == "src" and v) or v.startswith(("http:", "https:", "//")):
                if not (tag == "a"):
                    self.external.append((tag, k, v))

    handle_startendtag = handle_starttag


def check_html(path, min_plots):
    d = Dom()
    d.feed(open(path, encoding="utf-8").read())
    plots = [n for n in d.svgs if n > 0]
    if len(plots) < min_plots:
        fail(f"{path}: {len(plots)} inline SVG plots with polylines, expected >= {min_plots}")
    if d.external:
        fail(f"{path}: external resources {d.external}")
    if d.pre == 0:
        fail(f"{path}: no <pre> blocks (sources and outputs)")
    print(f"{path}: ok ({len(plots)} plots, {d.pre} pre blocks)")


if __name__ == "__main__":
    if sys.argv[1] == "svg":
        check_svg(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    elif sys.argv[1] == "html":
        check_html(sys.argv[2], int(sys.argv[3]))
    else:
        fail("usage: check_report.py svg|html FILE [N]")
