"""Turn capture: sanitising, tool-call normalisation, L1 trace steps."""
