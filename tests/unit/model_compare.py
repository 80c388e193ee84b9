"""Comparing parsed experiments by content, ignoring source positions."""

import dataclasses


def without_where(value):
    """The experiment with every `where` cleared, to compare content only."""
    if dataclasses.is_dataclass(value):
        return dataclasses.replace(
            value,
            **{
                f.name: None if f.name == "where" else without_where(getattr(value, f.name))
                for f in dataclasses.fields(value)
            },
        )
    if isinstance(value, tuple):
        return tuple(without_where(item) for item in value)
    return value
