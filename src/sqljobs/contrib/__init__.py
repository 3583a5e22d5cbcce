"""Integrations with the frameworks sqljobs is used from. Each submodule imports only what
its framework needs, so importing ``sqljobs`` never pulls a web framework in."""
