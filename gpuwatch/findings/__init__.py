"""Findings: every analysis and the recommendations, assembled once for every consumer."""
