"""vitbert."""
