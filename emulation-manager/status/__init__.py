"""collapsar.manager.status."""
