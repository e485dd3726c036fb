"""flexrt.search: lands with its issue (see README)."""
