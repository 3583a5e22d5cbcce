"""Integrations with frameworks: each imports its framework only when it is used."""
