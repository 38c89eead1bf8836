"""Typed requests: what a caller asks the service to do, parsed and validated at the edge.

``validate`` holds the small field readers the parsers share. Each request type is a frozen dataclass with a
``from_json`` that raises :class:`memmy.errors.InvalidArgument` for bad input, so the service only ever sees
well-formed values.
"""
