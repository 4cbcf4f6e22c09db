"""Packaging finished runs into an MLPerf submission tree."""
