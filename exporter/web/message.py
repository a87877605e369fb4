"""HTTP/1.1 messages for the listener: the request and response records, parsing a request head strictly
(anything ambiguous is refused with its status) and writing a response."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from urllib.parse import urlsplit


@dataclass
class Request:
    method: str
    target: str
    path: str              # the target's path, without query string
    version: str           # "HTTP/1.1" or "HTTP/1.0"
    headers: dict          # lower-cased name -> value (names that may not repeat are checked)


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: dict = field(default_factory=dict)
    close: bool = False


_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
HEAD_END = re.compile(rb"\r?\n\r?\n")
# a repeated Content-Length or Authorization is ambiguous (request smuggling, credential confusion): 400
_SINGLE = frozenset({"content-length", "authorization", "host", "transfer-encoding"})


def parse_head(head: bytes, max_headers: int) -> tuple[Request | None, int | None]:
    """A request head (without its blank line) as a Request, or None and the status to refuse it with."""
    lines = head.split(b"\n")
    parts = lines[0].rstrip(b"\r").split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        return None, HTTPStatus.BAD_REQUEST
    method, target, version = (p.decode("latin-1") for p in parts)
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        return None, (HTTPStatus.HTTP_VERSION_NOT_SUPPORTED if re.fullmatch(r"HTTP/\d(\.\d)?", version)
                      else HTTPStatus.BAD_REQUEST)
    if len(lines) - 1 > max_headers:
        return None, HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        name, colon, value = raw.rstrip(b"\r").partition(b":")
        if not colon or not _TOKEN.fullmatch(name):    # also refuses obsolete line folding
            return None, HTTPStatus.BAD_REQUEST
        key = name.decode("ascii").lower()
        if key in headers:
            if key in _SINGLE:
                return None, HTTPStatus.BAD_REQUEST
            headers[key] += ", " + value.strip().decode("latin-1")
        else:
            headers[key] = value.strip().decode("latin-1")
    length = headers.get("content-length", "0")
    if not length.isdigit():
        return None, HTTPStatus.BAD_REQUEST
    if target.startswith("/"):
        path = target.split("?", 1)[0]
    elif target.startswith(("http://", "https://")):     # absolute form (RFC 9112 3.2.2)
        path = urlsplit(target).path or "/"
    else:
        path = ""           # "*" or garbage: no route matches, the handler answers 404
    return Request(method, target, path, version, headers), None


def wants_close(request: Request) -> bool:
    tokens = {t.strip().lower() for t in request.headers.get("connection", "").split(",")}
    body = request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers
    # a body we do not read would be taken for the next request: answer, then close
    return request.version == "HTTP/1.0" or "close" in tokens or body


def serialize(request: Request | None, response: Response, close: bool) -> bytes:
    status = HTTPStatus(response.status)
    lines = [f"HTTP/1.1 {status.value} {status.phrase}", f"Date: {formatdate(usegmt=True)}",
             f"Content-Type: {response.content_type}", f"Content-Length: {len(response.body)}"]
    lines += [f"{k}: {v}" for k, v in response.headers.items()]
    if close:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    if request is not None and request.method == "HEAD":
        return head
    return head + response.body
