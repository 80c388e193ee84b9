"""collapsar.manager.local."""
