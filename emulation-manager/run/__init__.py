"""collapsar.manager.run."""
