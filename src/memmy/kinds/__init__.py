"""The kinds of memory and how each is stored, one module per kind: ``trace`` (L1), ``episode`` (a rollup of a
task's traces), ``policy`` (L2), ``world`` (L3), ``skill``.

Each kind owns its typed payload (a frozen dataclass read from its section of ``Memory.properties`` and written
back in the same stored form), the names of its stored fields (SQL reads them by JSON path), the text it is
embedded by and the one line an agent reads. ``memory.py`` holds the properties every kind shares (summary,
review, validity, scope, embedding text). A low, pure package: it imports ``memmy.domain`` only.
"""
