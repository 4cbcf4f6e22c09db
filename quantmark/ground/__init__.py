"""The ground every part of quantmark stands on: errors, hashing, paths and caches, the run
config, locks, the results layout, and the facts of the machine (CPU, board, GPU, installed
versions). It imports nothing of quantmark above it (import-linter checks this in CI)."""
