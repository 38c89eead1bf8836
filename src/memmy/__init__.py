"""memmy: one local memory shared by all of a person's coding agents."""

__version__ = "0.1.0"
