"""`paraplan report` and `paraplan compare`: the HTML page (page.py), its inline SVG charts
(svg.py), and two plans side by side with why one is faster (compare.py)."""
