"""collapsar.manager.measure."""
