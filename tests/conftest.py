"""Puts tests/ on sys.path (pytest prepend mode) so test files share tests/randinst.py."""
