"""Integration tests of `tractd serve` (see conftest.py)."""
