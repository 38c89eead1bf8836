"""One installer module per agent."""
