"""collapsar.manager.sharing."""
