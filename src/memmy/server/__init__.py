"""The HTTP daemon."""
