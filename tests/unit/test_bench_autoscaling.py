"""bench/autoscaling.py's scrape-cost half runs (the from-zero half needs the stack: `python -m bench.autoscaling`)."""

from __future__ import annotations

from bench.autoscaling import scrape_cost


def test_scrape_cost_measures_a_round_a_scrape_and_the_baseline() -> None:
    cost = scrape_cost(jobs=50, nodes=10, rounds=2)
    assert cost["round_ms"] > 0 and cost["parse_ms"] > 0 and cost["scrape_ms"] > 0
    assert cost["scrape_bytes"] > 1000
