"""One module per `collapsar` verb (see collapsar.cli.COMMANDS)."""
