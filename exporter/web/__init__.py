"""The HTTP face of `serve`: /metrics, the status page, the API, runbooks, health; TLS and basic auth.

- `server`: the endpoints; `listener`, `connection`, `message`: the HTTP/1.1 listener, one connection's
  steps, request heads parsed and responses written;
- `expose`: the Prometheus collector, built at scrape time;
- `status_page`, `svg_chart`, `recent`, `markdown`: the page at `/`, its charts, the last hour it draws, the
  runbooks as HTML.

Nothing is imported here, so a command that needs one module does not load the server.
"""
