"""The analyze face: a log replayed on its own clock (`analyze`), reported as text (`text`) or HTML (`html`).

Nothing is imported here, so `analyze --format text` does not load the HTML report.
"""
