#!/usr/bin/env python3
"""Checks the links of every Markdown file of the repository: check-links.py [root]

- A relative link must name a file or folder of the repository (tracked, or new and not
  ignored), and its #anchor a heading of the Markdown file it names, by GitHub's slug rules
  (lower case; punctuation but `-` and `_` dropped; each space a `-`; a repeated heading gets
  `-1`, `-2`, ...). An anchor alone (`#part`) names a heading of the same file.
- A reference link `[text][name]` needs a definition `[name]: target`, checked the same way.
- An external link (http, https) must be well formed: a host, no spaces. Nothing is fetched.
- A code span naming a source path of the repository (`src/controller/reconcile.rs`,
  `worker/src/task/`, optionally followed by `::item` or `:line`) must name a file or folder
  that exists: a restructure that moves a file fails here until the docs follow it. A Rust file's
  span followed by spans naming functions (`tests/x.rs` `a_test_name`, `b_test_name`) must hold
  each function (`fn a_test_name`).
- README.md is at most 200 lines.

Code blocks and code spans are not read as links. Prints every broken link as `file:line: why` and exits 1
when there is any; exits 0 with a one-line summary otherwise. Python 3 standard library only."""

import os
import re
import subprocess
import sys
import urllib.parse

README_MAX_LINES = 200

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[([^\]]+)\]:[ \t]*(<[^>]*>|\S+)")
FULL_REFERENCE = re.compile(r"(?<![\]\\])\[([^\]\n]+)\]\[([^\]\n]*)\]")
AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]*)>")
HTML_ANCHOR = re.compile(r"""<a\s[^>]*\b(?:name|id)\s*=\s*["']([^"']+)["']""", re.I)
HTML_LINK = re.compile(r"""<(?:a|img)\s[^>]*\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)
LINE_ANCHOR = re.compile(r"^L\d+(?:C\d+)?(?:-L\d+(?:C\d+)?)?$")
HOST = re.compile(r"^[A-Za-z0-9.-]+$")
FUNCTION_NAME = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+){2,}$")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
SOURCE_ROOTS = ("src/", "worker/", "contract/", "failpoint/", "test-tools/", "tests/", "benches/",
                "scripts/", "charts/", "demo/", "docs/", "examples/", "crds/")
SOURCE_PATH = re.compile(r"^([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+/?)(?:::[A-Za-z0-9_:]+|:\d+(?:-\d+)?)?$")


def repository_files(root):
    """Every file a clone would have: tracked, plus new files git does not ignore."""
    try:
        listed = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True).stdout.decode().split("\0")
        files = {f for f in listed if f and os.path.lexists(os.path.join(root, f))}
    except (OSError, subprocess.CalledProcessError):
        files = set()
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d not in (".git", "target")]
            for name in names:
                files.add(os.path.relpath(os.path.join(folder, name), root))
    folders = {""}
    for f in files:
        parts = f.split("/")[:-1]
        for i in range(len(parts)):
            folders.add("/".join(parts[: i + 1]))
    return files, folders


def blank_code(text):
    """The text with fenced code blocks and code spans blanked, lines kept."""
    return re.sub(r"(`+)(?:.|\n)*?(?<!`)\1(?!`)",
                  lambda m: re.sub(r"[^\n]", " ", m.group(0)), blank_fences(text))


def heading_text(raw):
    """What GitHub renders of a heading's source: code spans' content, link texts, no markup."""
    pieces = re.split(r"(`+)(.*?)\1", raw)
    out = []
    for i in range(0, len(pieces), 3):
        plain = pieces[i]
        plain = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", plain)
        plain = re.sub(r"!?\[([^\]]*)\]\[[^\]]*\]", r"\1", plain)
        plain = re.sub(r"<[^>]+>", "", plain)
        plain = re.sub(r"\\(.)", r"\1", plain)
        plain = re.sub(r"(?<!\w)_+|_+(?!\w)", "", plain)
        out.append(plain)
        if i + 2 < len(pieces):
            out.append(pieces[i + 2])
    return "".join(out).strip()


def slug(text):
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors_of(text):
    """Every anchor a Markdown file has: its headings' slugs (repeats numbered) and HTML ids."""
    anchors = set()
    seen = {}
    lines = blank_fences(text).split("\n")
    for i, line in enumerate(lines):
        heading = None
        match = ATX_HEADING.match(line)
        if match:
            heading = match.group(2) or ""
        elif i > 0 and SETEXT_UNDERLINE.match(line) and lines[i - 1].strip() \
                and not ATX_HEADING.match(lines[i - 1]) and not lines[i - 1].lstrip().startswith(("|", "-", "*", ">")):
            heading = lines[i - 1].strip()
        if heading is None:
            continue
        base = slug(heading_text(heading))
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.add(base if count == 0 else f"{base}-{count}")
    anchors.update(HTML_ANCHOR.findall(text))
    return anchors


def blank_fences(text):
    """The text with fenced code blocks blanked (code spans kept: headings may hold them)."""
    lines = text.split("\n")
    fence = None
    for i, line in enumerate(lines):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            lines[i] = ""
        elif fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                    and not line.strip().lstrip(fence[0]):
                fence = None
            lines[i] = ""
    return "\n".join(lines)


def inline_links(text):
    """(offset, destination, closed) of every inline link and image `[text](destination "title")`;
    `closed` is false when no `)` ends it (GitHub then shows the text, not a link)."""
    found = []
    for match in re.finditer(r"\]\(", text):
        start = match.end()
        opening = text.rfind("[", 0, match.start())
        if opening < 0 or "\n\n" in text[opening:match.start()]:
            continue
        if text[start:start + 1] == "<":
            end = text.find(">", start)
            if end < 0:
                found.append((start, text[start + 1:], False))
                continue
            destination, i = text[start + 1:end], end + 1
        else:
            depth, i = 0, start
            while i < len(text):
                c = text[i]
                if c == "\\":
                    i += 2
                    continue
                if c == "(":
                    depth += 1
                elif c == ")":
                    if depth == 0:
                        break
                    depth -= 1
                elif c.isspace():
                    break
                i += 1
            destination = text[start:i]
        rest = re.match(r"""[ \t]*\n?[ \t]*(?:(?:"[^"]*"|'[^']*'|\([^)]*\))[ \t]*)?\)""", text[i:])
        found.append((start, destination, rest is not None))
    return found


def check_external(url):
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "mailto":
        return None if "@" in parts.path else "a mailto link without an address"
    if not parts.netloc:
        return "no host"
    host = parts.hostname or ""
    if not HOST.match(host) or ("." not in host and host != "localhost"):
        return f"host {host!r} is not a host name"
    if any(c.isspace() for c in url):
        return "a space in the URL"
    return None


class Checker:
    def __init__(self, root):
        self.root = root
        self.files, self.folders = repository_files(root)
        self.anchor_cache = {}
        self.problems = []
        self.links = 0

    def anchors(self, path):
        if path not in self.anchor_cache:
            with open(os.path.join(self.root, path), encoding="utf-8") as f:
                self.anchor_cache[path] = anchors_of(f.read())
        return self.anchor_cache[path]

    def check(self, source, line, target):
        self.links += 1
        where = f"{source}:{line}"
        target = target.strip()
        if not target:
            self.problems.append(f"{where}: an empty link")
            return
        scheme = urllib.parse.urlsplit(target).scheme
        if scheme in ("http", "https", "mailto"):
            why = check_external(target)
            if why:
                self.problems.append(f"{where}: {target}: malformed ({why})")
            return
        if scheme:
            self.problems.append(f"{where}: {target}: a link with the scheme {scheme!r} (only relative, http, https, mailto)")
            return
        path, _, anchor = target.partition("#")
        path = urllib.parse.unquote(path.split("?", 1)[0])
        if path:
            base = "" if path.startswith("/") else os.path.dirname(source)
            resolved = os.path.normpath(os.path.join(base, path.lstrip("/"))).replace(os.sep, "/")
            if resolved == ".":
                resolved = ""
            if resolved.startswith("../"):
                self.problems.append(f"{where}: {target}: points outside the repository")
                return
            if resolved not in self.files and resolved not in self.folders:
                self.problems.append(f"{where}: {target}: no such file or folder ({resolved})")
                return
        else:
            resolved = source
        if not anchor:
            return
        anchor = urllib.parse.unquote(anchor)
        if resolved in self.folders:
            readme = f"{resolved}/README.md".lstrip("/")
            if readme not in self.files:
                self.problems.append(f"{where}: {target}: an anchor into a folder without README.md")
                return
            resolved = readme
        if not resolved.lower().endswith((".md", ".markdown")):
            if not LINE_ANCHOR.match(anchor):
                self.problems.append(f"{where}: {target}: an anchor into a file that is not Markdown")
            return
        if anchor not in self.anchors(resolved):
            self.problems.append(f"{where}: {target}: no heading '#{anchor}' in {resolved}")

    def check_source_paths(self, source, text):
        """Code spans that name a path under one of the repository's source folders, and the
        functions named right after a Rust file."""
        spans = list(CODE_SPAN.finditer(text))
        for index, match in enumerate(spans):
            path = SOURCE_PATH.match(match.group(1).strip())
            if not path or not path.group(1).startswith(SOURCE_ROOTS) or "*" in path.group(1):
                continue
            named = path.group(1).rstrip("/")
            line = text.count("\n", 0, match.start()) + 1
            if named not in self.files and named not in self.folders:
                self.problems.append(f"{source}:{line}: `{match.group(1)}`: no such file or folder in the repository")
                continue
            if named.endswith(".rs"):
                self.check_functions(source, line, named, spans[index + 1:], text, match.end())

    def check_functions(self, source, line, named, following, text, end):
        """The function-name spans that follow `named`, separated only by spaces and commas."""
        with open(os.path.join(self.root, named), encoding="utf-8") as f:
            code = f.read()
        for match in following:
            if text[end:match.start()].strip(" ,\n") or not FUNCTION_NAME.match(match.group(1)):
                return
            name = match.group(1)
            if not re.search(rf"\bfn {re.escape(name)}\b", code):
                self.problems.append(f"{source}:{line}: `{named}` `{name}`: no function {name} in {named}")
            end = match.end()

    def check_file(self, source):
        with open(os.path.join(self.root, source), encoding="utf-8") as f:
            raw = f.read()
        text = blank_code(raw)

        def line_of(offset):
            return text.count("\n", 0, offset) + 1

        definitions = {}
        for number, line in enumerate(text.split("\n"), 1):
            match = REFERENCE_DEFINITION.match(line)
            if match:
                name = " ".join(match.group(1).lower().split())
                definitions[name] = True
                self.check(source, number, match.group(2).strip("<>"))
        self.check_source_paths(source, blank_fences(raw))
        for offset, target, closed in inline_links(text):
            if closed:
                self.check(source, line_of(offset), target)
            else:
                self.links += 1
                self.problems.append(f"{source}:{line_of(offset)}: ({target.split(chr(10))[0][:60]}: a link with no closing ')'")
        for match in FULL_REFERENCE.finditer(text):
            name = " ".join((match.group(2) or match.group(1)).lower().split())
            if name not in definitions:
                self.links += 1
                self.problems.append(f"{source}:{line_of(match.start())}: [{match.group(1)}][{match.group(2)}]: no definition [{name}]: ...")
        for pattern in (AUTOLINK, HTML_LINK):
            for match in pattern.finditer(text):
                self.check(source, line_of(match.start()), match.group(1))
        if source == "README.md":
            lines = raw.count("\n") + (0 if raw.endswith("\n") or not raw else 1)
            if lines > README_MAX_LINES:
                self.problems.append(f"README.md: {lines} lines, more than {README_MAX_LINES}: move detail into docs/")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    checker = Checker(root)
    sources = sorted(f for f in checker.files if f.lower().endswith((".md", ".markdown")))
    for source in sources:
        checker.check_file(source)
    if checker.problems:
        print(f"check-links: {len(checker.problems)} broken link(s) in {len(sources)} Markdown files:", file=sys.stderr)
        for problem in checker.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"check-links: {checker.links} links in {len(sources)} Markdown files resolve; README.md is within {README_MAX_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
