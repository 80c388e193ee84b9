"""collapsar.manager.play."""
