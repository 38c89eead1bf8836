"""History import from each agent's own files: adapters, redaction, turn grouping, watermarks."""
