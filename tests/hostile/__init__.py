"""Attacks and careless input, one module per attack (issue: Hardening): each test reproduces what an attacker,
a flaky provider or a typo could do, against real servers on loopback."""
