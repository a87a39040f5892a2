"""Serving-engine adapters: flag names, launch rules and rendering per engine."""
