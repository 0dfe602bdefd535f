"""report_dom.py: checks the DOM of a `cohort report` page as a browser rendered it (chromium
--dump-dom), for tests/report/test_report_browser.sh. Not a test itself.

usage: report_dom.py DOM [--series FIGURE_ID=N]... [--rows N] [--lanes N] [--blocks N]
                         [--problem TEXT]... [--no-problems] [--label TEXT]...
Exits 1 naming every expectation the page misses."""
import argparse
import sys
from html.parser import HTMLParser


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.figure = None          # id of the <figure> being read
        self.series = {}            # figure id -> count of <g class="series">
        self.titles = {}            # figure id -> its <title> text
        self.figure_tables = {}     # figure id -> count of <table> inside it
        self.labels = []            # texts of <text class="axis-label">
        self.summary_rows = 0
        self.lanes = 0
        self.blocks = 0             # pipeline blocks drawn (rect.ev-forward/-backward)
        self.problems = []
        self.scripts = 0
        self.external = []          # src/href that would fetch something
        self.stack = []
        self.text_into = None
        self.in_summary = False
        self.in_tbody = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        self.stack.append(tag)
        if tag == "figure":
            self.figure = a.get("id")
            self.series.setdefault(self.figure, 0)
            self.figure_tables.setdefault(self.figure, 0)
        if tag == "g" and "series" in cls and self.figure:
            self.series[self.figure] += 1
        if tag == "g" and "lane" in cls:
            self.lanes += 1
        if tag == "rect" and ("ev-forward" in cls or "ev-backward" in cls):
            self.blocks += 1
        if tag == "table":
            if self.figure:
                self.figure_tables[self.figure] += 1
            self.in_summary = a.get("id") == "summary"
        if tag == "tbody":
            self.in_tbody = True
        if tag == "tr" and self.in_summary and self.in_tbody:
            self.summary_rows += 1
        if tag == "text" and "axis-label" in cls:
            self.text_into = ("label", [])
        if tag == "title" and self.figure and self.figure not in self.titles:
            self.text_into = ("title", [])
        if tag == "li" and "problem" in cls:
            self.text_into = ("problem", [])
        if tag == "script":
            self.scripts += 1
        for k in ("src", "href"):
            v = a.get(k)
            if v and not v.startswith("#") and not v.startswith("data:"):
                self.external.append(f"<{tag} {k}={v}>")

    def handle_endtag(self, tag):
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()
        if tag == "figure":
            self.figure = None
        if tag == "table":
            self.in_summary = False
        if tag == "tbody":
            self.in_tbody = False
        if self.text_into and tag in ("text", "title", "li"):
            kind, parts = self.text_into
            text = "".join(parts).strip()
            if kind == "label":
                self.labels.append(text)
            elif kind == "title":
                self.titles[self.figure] = text
            else:
                self.problems.append(text)
            self.text_into = None

    def handle_data(self, data):
        if self.text_into:
            self.text_into[1].append(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dom")
    ap.add_argument("--series", action="append", default=[])
    ap.add_argument("--rows", type=int)
    ap.add_argument("--lanes", type=int)
    ap.add_argument("--blocks", type=int, help="at least this many pipeline blocks")
    ap.add_argument("--problem", action="append", default=[])
    ap.add_argument("--no-problems", action="store_true")
    ap.add_argument("--label", action="append", default=[])
    args = ap.parse_args()
    p = Page()
    p.feed(open(args.dom, encoding="utf-8").read())
    bad = []
    for s in args.series:
        fig, n = s.split("=")
        got = p.series.get(fig)
        if got != int(n):
            bad.append(f"figure #{fig}: {got} series, expected {n}")
    for fig, n in p.figure_tables.items():  # a table behind every chart
        if n < 1:
            bad.append(f"figure #{fig} has no data table")
        if not p.titles.get(fig):
            bad.append(f"figure #{fig} has no <title>")
    for label in args.label:
        if label not in p.labels:
            bad.append(f"no axis label '{label}' (labels: {sorted(set(p.labels))})")
    if args.rows is not None and p.summary_rows != args.rows:
        bad.append(f"summary table: {p.summary_rows} rows, expected {args.rows}")
    if args.lanes is not None and p.lanes != args.lanes:
        bad.append(f"timeline: {p.lanes} lanes, expected {args.lanes}")
    if args.blocks is not None and p.blocks < args.blocks:
        bad.append(f"timeline: {p.blocks} pipeline blocks, expected at least {args.blocks}")
    for text in args.problem:
        if not any(text in q for q in p.problems):
            bad.append(f"no problem naming '{text}' (problems: {p.problems})")
    if args.no_problems and p.problems:
        bad.append(f"unexpected problems: {p.problems}")
    if p.scripts:
        bad.append(f"{p.scripts} <script> elements (the page has none)")
    if p.external:
        bad.append(f"the page fetches: {p.external}")
    for b in bad:
        print("FAIL:", b)
    print(f"dom: figures {p.series}, labels {len(p.labels)}, summary rows {p.summary_rows}, "
          f"lanes {p.lanes}, blocks {p.blocks}, problems {len(p.problems)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
