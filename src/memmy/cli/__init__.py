"""The ``memmy-memory`` command line."""
