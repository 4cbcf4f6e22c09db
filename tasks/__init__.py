"""Tasks: what a model's output means and how its quality is scored, one folder each
(classification, detection, ...), found as plugins the way framework folders are."""
