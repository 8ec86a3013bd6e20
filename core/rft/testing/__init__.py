"""Helpers for tests of rft and of its plugins: a tiny local model, fixtures."""
