"""test_data_unicode.py: the \\p{L} / \\p{N} tables of the GPT-2 pre-split are what
scripts/gen_unicode_classes.py makes from UnicodeData.txt, and they agree with two independent
classifiers: Python's unicodedata and Node.js's regex engine (the reference encoder's), on every
code point both Unicode versions assign. Skipped (77) when neither UnicodeData.txt nor node is
there."""
import json
import os
import re
import shutil
import subprocess
import sys
import unicodedata

SRC = os.environ.get("COHORT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TABLE = os.path.join(SRC, "src", "train", "data", "unicode_classes.c")
UCD = "/usr/share/unicode/UnicodeData.txt"
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


def parse_table(text, name):
    body = re.search(r"%s\[\] = \{(.*?)\};" % name, text, re.S).group(1)
    s = set()
    for lo, hi in re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+)\}", body):
        s.update(range(int(lo, 16), int(hi, 16) + 1))
    return s


def assigned_in_ucd():
    cps, first = set(), None
    with open(UCD, encoding="utf-8") as f:
        for line in f:
            fields = line.split(";")
            cp, name = int(fields[0], 16), fields[1]
            if name.endswith(", First>"):
                first = cp
                continue
            cps.update(range(first if name.endswith(", Last>") else cp, cp + 1))
            first = None
    return cps


def node_classes():
    script = r"""
const L = [], N = [];
for (let c = 0; c < 0x110000; c++) {
  if (c >= 0xD800 && c <= 0xDFFF) continue;
  const s = String.fromCodePoint(c);
  if (/^\p{L}$/u.test(s)) L.push(c);
  if (/^\p{N}$/u.test(s)) N.push(c);
}
process.stdout.write(JSON.stringify({L, N, unicode: process.versions.unicode}));
"""
    out = subprocess.run(["node", "-e", script], check=True, capture_output=True, text=True)
    d = json.loads(out.stdout)
    return set(d["L"]), set(d["N"]), d["unicode"]


def main():
    text = open(TABLE, encoding="utf-8").read()
    letters, numbers = parse_table(text, "coh_unicode_letters"), parse_table(text, "coh_unicode_numbers")
    check(len(letters) > 130000 and len(numbers) > 1700, "tables are implausibly small")
    check(not (letters & numbers), "a code point is both letter and number")
    ran = 0

    if os.path.exists(UCD):
        ran += 1
        gen = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "gen_unicode_classes.py"), UCD],
                             check=True, capture_output=True, text=True).stdout
        check(gen == text, "src/train/data/unicode_classes.c differs from the generator's output")
        assigned = assigned_in_ucd()
    else:
        print("note: %s missing, generator not checked" % UCD)
        assigned = set(range(0x110000))

    # Python's tables (its own Unicode version): where both versions assign a code point.
    ran += 1
    diff = [c for c in range(0x110000) if c in assigned and unicodedata.category(chr(c)) != "Cn"
            and ((unicodedata.category(chr(c))[0] == "L") != (c in letters)
                 or (unicodedata.category(chr(c))[0] == "N") != (c in numbers))]
    check(not diff, "differs from Python's unicodedata %s at %s" %
          (unicodedata.unidata_version, ["U+%04X" % c for c in diff[:20]]))
    print("python unicodedata %s: %d assigned code points compared" % (unicodedata.unidata_version, len(assigned)))

    if shutil.which("node"):
        ran += 1
        nl, nn, version = node_classes()
        diff = [c for c in assigned if (c in nl) != (c in letters) or (c in nn) != (c in numbers)]
        check(not diff, "differs from node (Unicode %s) at %s" % (version, ["U+%04X" % c for c in diff[:20]]))
        newer = len((nl | nn) - assigned)
        print("node (Unicode %s): agrees on every code point our tables' version assigns; "
              "%d letters/numbers assigned later are not in our tables" % (version, newer))
    else:
        print("note: node missing, regex engine not compared")

    if ran < 2:
        print("skipped: nothing to compare against")
        return 77
    print("%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
