#!/usr/bin/env python3
"""Recount docs/CLI.md's Summary table from the rows above it.

Every table row under the `## zpool`, `## zfs` and `## zdb` sections whose
last column starts with a status word (works, differs, refused, missing,
no meaning) is counted once; the `(no command)` rows and ozfs's own
additions are not. `--check` exits 1 when the table in the file differs.
"""
import re
import sys

PATH = "docs/CLI.md"
STATUSES = ["works", "differs", "refused", "missing", "no meaning"]


def count(text):
    counts, cur = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            t = line[3:].strip()
            cur = t if t in ("zpool", "zfs", "zdb") else None
            continue
        if not cur or not line.startswith("| ") or "(no command)" in line:
            continue
        cols = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if "an ozfs addition" in cols[0]:
            continue
        for k in STATUSES:
            if cols[-1].startswith(k):
                counts.setdefault(cur, dict.fromkeys(STATUSES, 0))[k] += 1
                break
    return counts


def table(counts):
    rows = ["| tool | works | differs | refused | missing | no meaning in user space | rows |",
            "|---|---|---|---|---|---|---|"]
    tot = dict.fromkeys(STATUSES, 0)
    for tool in ("zpool", "zfs", "zdb"):
        c = counts.get(tool, dict.fromkeys(STATUSES, 0))
        for k in STATUSES:
            tot[k] += c[k]
        rows.append("| `%s` | %s | %d |" % (tool, " | ".join(str(c[k]) for k in STATUSES), sum(c.values())))
    rows.append("| **total** | %s | %d |" % (" | ".join(str(tot[k]) for k in STATUSES), sum(tot.values())))
    return "\n".join(rows)


def main():
    text = open(PATH).read()
    new_table = table(count(text))
    pat = re.compile(r"\| tool \| works \|.*?\n\| \*\*total\*\*[^\n]*", re.S)
    if not pat.search(text):
        sys.exit("%s: no Summary table found" % PATH)
    new = pat.sub(lambda _: new_table, text, count=1)
    if "--check" in sys.argv:
        if new != text:
            print(new_table)
            sys.exit("%s: the Summary table is out of date (run scripts/cli-summary.py)" % PATH)
        return
    open(PATH, "w").write(new)
    print(new_table)


if __name__ == "__main__":
    main()
