"""One module per agent; :data:`ADAPTERS` maps source ids to adapter instances."""
