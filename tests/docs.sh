#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# docs.sh: the documentation of the public API, in the headers and in the reference
# manual.
#
# The headers (always): every function declared in include/redislock/ carries an
# availability macro (REDIS_LOCK_AVAILABLE_IN_* or REDIS_LOCK_DEPRECATED_IN_*, see
# redislock-version.h), every doc comment there has a `Since:` line, and every try_
# call is G_GNUC_WARN_UNUSED_RESULT (an _async one returns nothing: its _finish is); a header added later is held to the same rules.
# The README and the man page say how to see the library's debug messages. The README
# stays under 350 lines, shows the chart, and links to the docs/ pages, every one of
# which the manual lists. Every page of the manuals opens with a Title: (gi-docgen's
# metadata), and no doc text of the headers starts with a word and a colon (which
# gi-docgen's Markdown would read as metadata and drop).
#
# The manual that docs/Makefile.am renders with gi-docgen from the GIR (configure
# --enable-docs): that it was built, that it has a page for each public type and for
# redis_lock_registry_new(), and that that page lists every URL form the library takes,
# as its doc comment does, the hand-written pages with the chart, and that
# `gi-docgen check` finds every symbol of both GIRs documented; that the testing
# library's manual is rendered beside it and linked from the testing page, each a
# Devhelp book named after its directory; that no page is an "Unknown document", no doc
# text of the GIRs starts as metadata, and every page of a function has a link in its
# text. Those checks are skipped in a build without the manual.
# Run by `make check` with REDISLOCK_DOCS (yes or no), GI_DOCGEN, G_TEST_SRCDIR and
# RL_TOP_BUILDDIR from tests/Makefile.am. Prints TAP.

set -u

n=0
failures=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
not_ok () { n=$((n + 1)); echo "not ok $n - $1"; failures=$((failures + 1)); }
# check DESCRIPTION COMMAND…: one TAP line for whether COMMAND succeeds
check () { d=$1; shift; if "$@"; then ok "$d"; else not_ok "$d"; fi; }

diag () { printf '%s\n' "$@" | sed 's/^/# /'; }

top=${G_TEST_SRCDIR:-$(dirname "$0")}/..
headers=$(ls "$top"/include/redislock/*.h "$top"/include/redislock/*.h.in 2>/dev/null)

# declarations HEADER…: one line per function declared at file scope, "FILE: the
# declaration on one line", comments, preprocessor lines (with their continuations)
# and the bodies of structures and enumerations left out.
declarations () {
  awk '
    FNR == 1 { incomment = 0; cont = 0; depth = 0; stmt = "" }
    {
      line = $0; out = ""
      while (length (line) > 0) {
        if (incomment) {
          i = index (line, "*/"); if (i == 0) { line = ""; break }
          line = substr (line, i + 2); incomment = 0
        } else {
          i = index (line, "/*"); if (i == 0) { out = out line; line = ""; break }
          out = out substr (line, 1, i - 1); line = substr (line, i + 2); incomment = 1
        }
      }
      line = out
      if (cont) { cont = (line ~ /\\$/); next }
      if (line ~ /^[ \t]*#/) { cont = (line ~ /\\$/); next }
      if (line ~ /^[ \t]*(G_BEGIN_DECLS|G_END_DECLS|G_DEFINE_[A-Z_]*[ (])/) next
      opened = gsub (/\{/, "{", line); closed = gsub (/\}/, "}", line)
      depth += opened - closed
      stmt = stmt " " line
      if (line ~ /;/ && depth == 0) {
        gsub (/[ \t]+/, " ", stmt); sub (/^ /, "", stmt)
        if (stmt ~ /\(/ && stmt !~ /^typedef /) print FILENAME ": " stmt
        stmt = ""
      }
    }' "$@"
}

decls=$(declarations $headers)
if [ "$(echo "$decls" | grep -c 'redis_lock_')" -ge 50 ]; then
  ok "the public headers declare functions ($(echo "$decls" | wc -l))"
else
  not_ok "the public headers declare functions (found $(echo "$decls" | grep -c 'redis_lock_'))"
fi
bad=$(echo "$decls" | grep -v -E '^[^:]*: (REDIS_LOCK_AVAILABLE_IN_|REDIS_LOCK_DEPRECATED_IN_)')
if [ -z "$bad" ]; then
  ok "every public function declaration carries REDIS_LOCK_AVAILABLE_IN_* or REDIS_LOCK_DEPRECATED_IN_*"
else
  not_ok "every public function declaration carries REDIS_LOCK_AVAILABLE_IN_* or REDIS_LOCK_DEPRECATED_IN_*"
  diag "without an availability macro (see redislock-version.h):" "$bad"
fi
bad=$(echo "$decls" | grep -E ' redis_lock_([a-z]+_)*try_[a-z_]* \(' | grep -v G_GNUC_WARN_UNUSED_RESULT |
  grep -v -E ' void redis_lock_([a-z]+_)*try_[a-z_]*_async \(')
if [ -z "$bad" ]; then
  ok "every try_ call is G_GNUC_WARN_UNUSED_RESULT"
else
  not_ok "every try_ call is G_GNUC_WARN_UNUSED_RESULT"
  diag "$bad"
fi

# The doc comments (/** … */) whose block has no "Since:" line, by the name that opens them.
bad=$(awk '
  /^\/\*\*$/ { inblock = 1; since = 0; name = ""; next }
  inblock && name == "" { name = $0; sub (/^ \* /, "", name); sub (/:.*/, "", name) }
  inblock && /^ \* Since: / { since = 1 }
  inblock && /\*\// { inblock = 0; if (!since) print FILENAME ": " name }
' $headers)
if [ -z "$bad" ]; then
  ok "every documented public symbol says Since:"
else
  not_ok "every documented public symbol says Since:"
  diag "without a Since: line:" "$bad"
fi

for f in README.md tools/redislock.1; do
  check "$f tells how to see the debug messages (G_MESSAGES_DEBUG=redislock)" \
    grep -q 'G_MESSAGES_DEBUG=redislock' "$top/$f"
done

# The README stays short and sends the reader to docs/ pages that exist; every page the
# manual lists (redislock.toml.in) is in docs/ and linked from the README.
lines=$(wc -l <"$top/README.md")
check "README.md has at most 350 lines ($lines)" test "$lines" -le 350
missing=
for link in $(grep -o '](docs/[^)#]*' "$top/README.md" | sed 's/^](//' | sort -u); do
  [ -e "$top/$link" ] || missing="$missing $link"
done
check "every docs/ file the README links to exists${missing:+ (missing:$missing)}" test -z "$missing"
missing=
for page in $(sed -n '/^content_files/,/^]/s/^ *"\([^"]*\)".*/\1/p' "$top/docs/redislock.toml.in"); do
  { [ -e "$top/docs/$page" ] && grep -q "](docs/$page" "$top/README.md"; } || missing="$missing $page"
done
check "every page of the manual is in docs/ and linked from the README${missing:+ (not:$missing)}" \
  test -z "$missing"
check "the README shows the chart docs/bench.svg" grep -q '](docs/bench.svg)' "$top/README.md"

# The hand-written pages open as gi-docgen reads them: a block of "Key: value" lines
# (the SPDX line, then the page's Title:) before the first blank line; a page without a
# Title: is listed as "Unknown document".
untitled=
for page in $(sed -n '/^content_files/,/^]/s/^ *"\([^"]*\)".*/\1/p' "$top"/docs/*.toml.in); do
  awk '
    /^$/ { exit }
    !/^[A-Za-z0-9_-]+: / { bad = 1 }
    /^Title: [^ ]/ { title = 1 }
    END { exit !(title && !bad) }' "$top/docs/$page" 2>/dev/null || untitled="$untitled $page"
done
check "every page of the manuals opens with its Title:${untitled:+ (not:$untitled)}" test -z "$untitled"

# gi-docgen reads a doc text whose first line starts "word:" as Markdown metadata and
# drops that line: the text of a parameter, a member, a return value, and the first
# line of a description must not start so (a "Since:"-like tag line and the symbol's
# own name line are not doc text).
bad=$(awk '
  /^\/\*\*[ \t]*$/ { inblock = 1; state = 0; next }
  inblock && /\*\// { inblock = 0; next }
  !inblock { next }
  state == 0 && /^ \* [A-Za-z_][A-Za-z0-9_:]*:/ && !/^ \* @/ { state = 1; next }
  /^ \*[ \t]*$/ { if (state == 1 || state == 2) state = 3; next }
  {
    text = $0; sub (/^ \* ?/, "", text)
    if (text ~ /^(Since|Deprecated|Stability):/) { state = 4; next }
    tagged = 0
    if (text ~ /^(@[A-Za-z0-9_.]+|Returns|Return value):/) {
      sub (/^(@[A-Za-z0-9_.]+|Returns|Return value):[ \t]*/, "", text)
      while (text ~ /^\([^)]*\)[ \t]*/) sub (/^\([^)]*\)[ \t]*/, "", text)
      sub (/^:[ \t]*/, "", text)
      tagged = 1; if (state == 1) state = 2
    } else if (state == 3 && text !~ /^[ \t]/) {
      tagged = 1; state = 4
    }
    if (tagged && text ~ /^[A-Za-z0-9_-]+:([ \t]|$)/) print FILENAME ":" FNR ": " $0
  }' $headers)
if [ -z "$bad" ]; then
  ok "no doc text in the headers starts with a word and a colon (gi-docgen would drop it)"
else
  not_ok "no doc text in the headers starts with a word and a colon (gi-docgen would drop it)"
  diag "reword these, so that their first word does not end in a colon:" "$bad"
fi

if [ "${REDISLOCK_DOCS:-no}" != yes ] || [ -z "${RL_TOP_BUILDDIR:-}" ]; then
  echo "ok $((n + 1)) # SKIP the reference manual is not built (configure --enable-docs)"
  n=$((n + 1))
  echo "1..$n"
  [ "$failures" -eq 0 ]
  exit
fi
# The manuals are Devhelp books named after their directories (NAME/NAME.devhelp2),
# as Devhelp looks them up; the API version is that of the library's GIR.
api=$(ls "$RL_TOP_BUILDDIR"/src/Redislock-*.gir 2>/dev/null | sed -n '1s/.*Redislock-\(.*\)\.gir$/\1/p')
ref=$RL_TOP_BUILDDIR/docs/reference/redislock-$api
tref=$RL_TOP_BUILDDIR/docs/reference/redislock-testing-$api
for book in "$ref" "$tref"; do
  check "the manual $(basename "$book") is a Devhelp book $(basename "$book").devhelp2" \
    test -s "$book/$(basename "$book").devhelp2"
done
check "the testing library's manual has an index" test -s "$tref/index.html"
check "the manual's testing page links to the testing library's manual" \
  grep -q "href=\"\.\./redislock-testing-$api/index.html\"" "$ref/testing.html"
bad=$(grep -l 'Unknown document' "$ref"/*.html "$tref"/*.html 2>/dev/null)
check "no page of the manuals lists an \"Unknown document\"${bad:+ ($(echo $bad))}" test -z "$bad"

# Markdown's metadata, seen in the GIRs: no doc text there starts with a word and a
# colon (the source check above, on what gi-docgen is given).
bad=$(python3 -c '
import re, sys
import xml.etree.ElementTree as ET
meta = re.compile(r"^[ ]{0,3}[A-Za-z0-9_-]+:")
for gir in sys.argv[1:]:
    for el in ET.parse(gir).iter():
        if el.tag.rsplit("}", 1)[-1].startswith("doc") and el.text and meta.match(el.text):
            print("%s:%s: %s" % (el.get("filename"), el.get("line"), el.text.splitlines()[0]))
' "$RL_TOP_BUILDDIR"/src/Redislock-*.gir "$RL_TOP_BUILDDIR"/testing/RedislockTesting-*.gir 2>&1)
check "no doc text of the GIRs starts with a word and a colon" test -z "$bad"
[ -z "$bad" ] || diag "$bad"

# Every page of a function, method or constructor links somewhere from its text (to a
# symbol, the error domain, a topic page): the links of the page's frame, of its
# title, of its parameters' types and GError's own are not counted.
links () {
  sed -n '/<section id="main"/,/<section id="search"/p' "$1" \
    | grep -v -e '<em>Type:</em>' -e 'error-reporting.html' -e 'class="anchor"' -e '<h1>' \
    | grep -c '<a '
}
unlinked=
pages=0
for page in "$ref"/method.*.html "$ref"/ctor.*.html "$ref"/func.*.html "$ref"/type_func.*.html \
  "$tref"/method.*.html "$tref"/ctor.*.html "$tref"/func.*.html "$tref"/type_func.*.html; do
  [ -e "$page" ] || continue
  pages=$((pages + 1))
  [ "$(links "$page")" -gt 0 ] || unlinked="$unlinked $(basename "$(dirname "$page")")/$(basename "$page")"
done
check "the manuals have function pages ($pages)" test "$pages" -ge 100
check "every function page of the manuals links from its text ($(echo $unlinked | wc -w) do not)" \
  test -z "$unlinked"
[ -z "$unlinked" ] || diag "without a link:" $unlinked

# gi-docgen check: no symbol of either GIR without documentation.
for gir in "$RL_TOP_BUILDDIR"/src/Redislock-*.gir "$RL_TOP_BUILDDIR"/testing/RedislockTesting-*.gir; do
  if "${GI_DOCGEN:-gi-docgen}" check "$gir" >"${TMPDIR:-/tmp}/redislock-docs-check.$$" 2>&1 \
     && ! grep -q WARNING "${TMPDIR:-/tmp}/redislock-docs-check.$$"; then
    ok "gi-docgen check $(basename "$gir") reports nothing"
  else
    not_ok "gi-docgen check $(basename "$gir") reports nothing"
    grep WARNING "${TMPDIR:-/tmp}/redislock-docs-check.$$" | sed 's/^/# /'
  fi
  rm -f "${TMPDIR:-/tmp}/redislock-docs-check.$$"
done
check "the manual has an index" test -s "$ref/index.html"
for page in c-api.html performance.html bench.svg; do
  check "the manual has $page" test -s "$ref/$page"
done
check "the manual's pages link to each other as .html" grep -q 'href="fencing.html"' "$ref/faults.html"
for page in struct.LockRegistry.html struct.Lock.html enum.LockWaitMode.html \
  ctor.LockRegistry.new.html method.Lock.try_lock_for.html; do
  check "the manual has $page" test -s "$ref/$page"
done
page=$ref/ctor.LockRegistry.new.html
missing=
for f in redis:// rediss:// unix:// redis-sentinel:// rediss-sentinel:// redis-cluster:// \
  rediss-cluster:// memory://; do
  grep -q -- "$f" "$page" 2>/dev/null || missing="$missing $f"
done
check "the page of redis_lock_registry_new lists every URL form${missing:+ (missing:$missing)}" \
  test -z "$missing"

echo "1..$n"
[ "$failures" -eq 0 ]
