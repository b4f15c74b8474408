"""Search results with snippets on a site opened from disk.

Sphinx's search page shows under each result a snippet of the page around the search word, which it
gets by fetching the result page; a browser refuses ``fetch`` over ``file://``, so a site opened from
disk shows bare titles. After an HTML build this writes ``_static/search-texts.js``, the text of every
page's main content (read back from the written pages, so a parallel write changes nothing), and the
search page loads it with ``search-snippets.js``, which answers Sphinx's fetch of a page from that
text (and leaves every other request to the browser).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

TEXTS_JS = "search-texts.js"
SNIPPETS_JS = "search-snippets.js"
#: the most of a page's text kept for snippets (about 2 MB for the whole site; Sphinx shows 240 characters
#: around a match)
MAX_CHARS = 200_000

_MAIN = re.compile(r'<article[^>]*role="main"[^>]*>(.*?)</article>', re.DOTALL)
_DROP = re.compile(r'(?is)<(script|style)\b.*?</\1>|<a class="headerlink"[^>]*>.*?</a>')


def page_text(page: str) -> str:
    """The text of a built page's main content (``<article role="main">``), one space between words."""
    found = _MAIN.search(page)
    body = _DROP.sub(" ", found.group(1) if found else "")
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())[:MAX_CHARS]


def add_search_scripts(app, pagename, templatename, context, doctree):
    """The search page (only it) loads the page texts and the fetch that answers from them."""
    if pagename == "search":
        app.add_js_file(TEXTS_JS)
        app.add_js_file(SNIPPETS_JS)


def write_texts(app, exc):
    """``_static/search-texts.js``: ``{page URL relative to the site: text}`` of every page."""
    if exc is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    texts = {}
    for docname in sorted(app.env.found_docs):
        path = out / app.builder.get_target_uri(docname)
        if path.is_file():
            texts[app.builder.get_target_uri(docname)] = page_text(path.read_text(encoding="utf-8"))
    static = out / "_static"
    static.mkdir(exist_ok=True)
    (static / TEXTS_JS).write_text("window.WORKBENCH_SEARCH_TEXTS = " + json.dumps(texts, ensure_ascii=True)
                                   + ";\n", encoding="utf-8")
