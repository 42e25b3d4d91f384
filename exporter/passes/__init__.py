"""Passes over the FX graph before translation: inlining grad regions, decomposition, type promotion, modularization."""
