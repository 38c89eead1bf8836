"""One reader per agent transcript format, shared by the history importer and the hooks. Standard library only.

``model`` holds the message model (``SourceMessage``, ``Conversation``, ``ScanStats``) and the JSONL/time/text
helpers; ``claude_code`` and ``codex`` turn transcript records into messages; ``turns`` groups messages into turns.
The importer (``memmy.sources``) reads whole files; a hook (``memmy.hook``) reads the tail of the live transcript
with the same readers, so both give a turn the same conversation id and opening message id (its host identity).
"""
