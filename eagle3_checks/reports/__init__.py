"""Rendering a gate result: text, JSON and markdown for people, GitHub and SARIF for CI, root causes."""
