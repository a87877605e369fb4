"""Our generated runbooks' markdown as HTML, for the sidecar's /runbooks/ pages: the subset they use (headings,
paragraphs, lists, fenced code, tables, inline code, bold, links) and no more. Every piece of text is escaped;
a link goes only to http(s) or a relative path, and a relative `X.md` becomes `X.html`, the page this server
renders of it."""
from __future__ import annotations

import re
from html import escape, unescape

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_HEADING = re.compile(r"(#{1,6}) +(.*)")
_ORDERED = re.compile(r"\d+\. +(.*)")


def _href(url: str) -> str | None:
    if re.match(r"https?://", url):
        return url
    if ":" in url.split("/", 1)[0] or url.startswith("//"):
        return None          # another scheme (javascript:, data:, ...): shown as text
    return re.sub(r"\.md(#|$)", r".html\1", url)


def inline(text: str) -> str:
    """One line's inline markup, escaped: `code` spans are set aside first (nothing inside them is markup, and
    bold or a link may hold one), then **bold** and [links](url) over the rest."""
    codes: list[str] = []

    def keep(m: re.Match) -> str:
        codes.append(f"<code>{escape(m.group(1))}</code>")
        return f"\x00{len(codes) - 1}\x00"

    text = escape(re.sub(r"`([^`]+)`", keep, text.replace("\x00", "")), quote=False)

    def link(m: re.Match) -> str:
        href = _href(unescape(m.group(2)))
        return f'<a href="{escape(href)}">{m.group(1)}</a>' if href else m.group(1)

    text = _BOLD.sub(r"<b>\1</b>", _LINK.sub(link, text))
    return re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], text)


def _cells(row: str) -> list[str]:
    """A table row's cells, split on | outside `code`."""
    text = row.strip()
    text = text[1:] if text.startswith("|") else text
    text = text[:-1] if text.endswith("|") else text
    cells: list[str] = []
    cur: list[str] = []
    in_code = False
    for ch in text:
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    cells.append("".join(cur).strip())
    return cells


def to_html(markdown: str) -> str:
    """The body HTML of a markdown document (our subset)."""
    lines = markdown.splitlines()
    out: list[str] = []
    para: list[str] = []
    i = 0

    def flush_para() -> None:
        if para:
            out.append("<p>" + " ".join(inline(p) for p in para) + "</p>")
            para.clear()

    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("<!--"):
            flush_para()
            while i < len(lines) and "-->" not in lines[i]:
                i += 1
            i += 1
            continue
        if stripped.startswith("```"):
            flush_para()
            lang = stripped[3:].strip()
            code = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                code.append(lines[i])
                i += 1
            i += 1
            cls = f' class="language-{escape(lang)}"' if lang else ""
            out.append(f"<pre><code{cls}>{escape(chr(10).join(code))}</code></pre>")
            continue
        m = _HEADING.fullmatch(stripped)
        if m:
            flush_para()
            level = len(m.group(1))
            out.append(f"<h{level}>{inline(m.group(2))}</h{level}>")
            i += 1
            continue
        if stripped.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|?[\s:|-]+\|?", lines[i + 1].strip()):
            flush_para()
            head = _cells(stripped)
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out.append("<table><tr>" + "".join(f"<th>{inline(c)}</th>" for c in head) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in rows)
                       + "</table>")
            continue
        if stripped.startswith(("- ", "* ")) or _ORDERED.fullmatch(stripped):
            flush_para()
            ordered = not stripped.startswith(("- ", "* "))
            first = int(stripped.split(".", 1)[0]) if ordered else 1
            items: list[str] = []
            while i < len(lines):
                s = lines[i].strip()
                om = _ORDERED.fullmatch(s)
                if ordered and om:
                    items.append(om.group(1))
                elif not ordered and s.startswith(("- ", "* ")):
                    items.append(s[2:])
                elif s and lines[i].startswith((" ", "\t")) and items:
                    items[-1] += " " + s          # a wrapped item
                else:
                    break
                i += 1
            tag = "ol" if ordered else "ul"
            start = f' start="{first}"' if ordered and first != 1 else ""
            out.append(f"<{tag}{start}>" + "".join(f"<li>{inline(it)}</li>" for it in items) + f"</{tag}>")
            continue
        if not stripped:
            flush_para()
        else:
            para.append(stripped)
        i += 1
    flush_para()
    return "\n".join(out)


RUNBOOK_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:960px;
padding:0 12px;color:#222;line-height:1.45}h1{font-size:22px}h2{font-size:17px;border-bottom:1px solid #ddd;
padding-bottom:3px}pre{background:#f6f8fa;padding:8px 10px;overflow-x:auto;font-size:12.5px}code{font-size:12.5px}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:4px 8px;font-size:13px;text-align:left}
nav{font-size:13px;color:#555}"""


def page(title: str, markdown: str, nav: str) -> str:
    """A whole HTML page of a markdown document; `nav` is trusted HTML (links of this server)."""
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<style>{RUNBOOK_CSS}</style></head><body><nav>{nav}</nav>{to_html(markdown)}</body></html>\n")
