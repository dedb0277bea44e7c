#!/usr/bin/env python3
"""Checks the links of the built book, and of the repository's top-level Markdown files,
without the network: every relative link must name a file that exists and, with a
#fragment, an element with that id. External links (http:, https:, mailto:) are not
fetched.

    python3 scripts/check-links.py [BOOK_DIR]     # default target/book (mdbook build docs)

Exits 1 listing every broken link, 0 when there is none.
"""
import html.parser
import os
import re
import sys
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//")
# mdbook's own pages: print.html repeats every page with its links rewritten, 404.html is a
# template served from anywhere.
SKIP = {"print.html", "404.html", "toc.html"}


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        for key in ("href", "src"):
            if attrs.get(key) and tag in ("a", "img", "link", "script"):
                self.links.append((tag, attrs[key]))


pages = {}


def parse(path):
    if path not in pages:
        page = Page()
        with open(path, encoding="utf-8") as f:
            page.feed(f.read())
        pages[path] = page
    return pages[path]


def check(source, target, fragment, errors, where):
    if not os.path.exists(target):
        errors.append(f"{where}: {os.path.relpath(target, ROOT)} does not exist")
        return
    if fragment and target.endswith(".html"):
        if urllib.parse.unquote(fragment) not in parse(target).ids:
            errors.append(f"{where}: no #{fragment} in {os.path.relpath(target, ROOT)}")


def check_book(book, errors):
    book = os.path.abspath(book)
    count = 0
    for folder, _, files in os.walk(book):
        for name in files:
            if not name.endswith(".html") or name in SKIP:
                continue
            path = os.path.join(folder, name)
            for tag, link in parse(path).links:
                if EXTERNAL.match(link) or link.startswith("javascript:"):
                    continue
                count += 1
                target, _, fragment = link.partition("#")
                target = urllib.parse.unquote(target.split("?")[0])
                target = os.path.normpath(os.path.join(folder, target)) if target else path
                where = f"{os.path.relpath(path, book)}: <{tag}> {link}"
                if not (target + os.sep).startswith(book + os.sep) and target != book:
                    errors.append(f"{where}: leaves the book")
                    continue
                if os.path.isdir(target):
                    target = os.path.join(target, "index.html")
                check(path, target, fragment, errors, where)
    return count


MD_LINK = re.compile(r"\]\(([^()\s]+)\)")


def check_markdown(book, errors):
    """The top-level Markdown files link into docs/: a page's file must exist, and a
    #fragment must be an id of that page as the book renders it."""
    count = 0
    for name in sorted(os.listdir(ROOT)):
        if not name.endswith(".md"):
            continue
        text = open(os.path.join(ROOT, name), encoding="utf-8").read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for link in MD_LINK.findall(text):
            if EXTERNAL.match(link):
                continue
            count += 1
            target, _, fragment = link.partition("#")
            where = f"{name}: ({link})"
            path = os.path.normpath(os.path.join(ROOT, target)) if target else os.path.join(ROOT, name)
            if not os.path.exists(path):
                errors.append(f"{where}: {target} does not exist")
                continue
            docs = os.path.join(ROOT, "docs") + os.sep
            if fragment and path.startswith(docs) and path.endswith(".md"):
                rendered = os.path.join(book, path[len(docs):-3] + ".html")
                check(path, rendered, fragment, errors, where)
    return count


def main():
    book = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "book")
    if not os.path.exists(os.path.join(book, "index.html")):
        sys.exit(f"check-links: no book at {book}; run `mdbook build docs` first")
    errors = []
    count = check_book(book, errors) + check_markdown(book, errors)
    for error in errors:
        print(error)
    print(f"check-links: {count} internal links, {len(errors)} broken")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
