"""One run: launch, the test process, its folder, checks, repeats, interference, the record."""
