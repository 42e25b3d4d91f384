"""Capture: a model and its example inputs → an exported FX graph (strategies, dynamic shapes, fake mode, adapters)."""
