#!/usr/bin/env python3
"""Lists the crate's public API from rustdoc HTML, one line per item or member signature,
sorted, so two builds can be diffed (a stand-in for cargo-public-api, which needs nightly).

Usage: cargo doc --no-deps --all-features && python3 scripts/public-api.py > api.txt
"""
import html
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/doc/quorum_lock")
TAG = re.compile(r"<[^>]+>")
BLOCKS = [
    re.compile(r'<pre class="rust item-decl"><code>(.*?)</code></pre>', re.S),
    re.compile(r'<h[34] class="code-header">(.*?)</h[34]>', re.S),
]


def text(fragment: str) -> str:
    plain = html.unescape(TAG.sub("", fragment))
    plain = re.sub(r"Show \d+ (fields|variants|methods)", "", plain)
    return " ".join(plain.split())


lines = set()
for page in sorted(root.rglob("*.html")):
    rel = page.relative_to(root).as_posix()
    if rel.startswith(("src/", "search", "settings", "help", "all.html")) or page.name == "sidebar-items.js":
        continue
    body = page.read_text(errors="replace")
    if 'http-equiv="refresh"' in body:
        continue  # redirect stubs
    for pattern in BLOCKS:
        for m in pattern.finditer(body):
            sig = text(m.group(1))
            if sig:
                lines.add(f"{rel}: {sig}")
for line in sorted(lines):
    print(line)
