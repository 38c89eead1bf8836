"""Dream: the periodic consolidation pass (merge duplicates, archive stale or superseded memories) and its undo.

``plan`` decides what one pass would change without writing; ``ops`` applies a plan in one transaction, logs
every change so a pass can be restored byte for byte, and schedules the pass.
"""
