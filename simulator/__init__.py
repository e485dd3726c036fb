"""flexrt.simulator: lands with its issue (see README)."""
