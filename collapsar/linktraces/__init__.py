"""collapsar.linktraces: links whose bandwidth, latency or loss follow a
trace file (the `trace` key of a link, docs/language.md).

Owns, one module each:
- `compile`: the `trace` key of the `links:` block, and compiling each
  trace's steps into the experiment's events (a LinkSetEvent per step that
  changes something), checked against the link and its other events;
- `files`: opening a trace file below the experiment's folder (no symlink
  followed, bounded) and telling its format from its first line;
- `csvtrace`, `mahimahi`: the two formats, parsed and resampled onto steps;
- `base`: what both formats share (a parsed trace, its steps, the bounds,
  the problems of one file, each at FILE:LINE).

Does not own: the timeline that plays the steps (collapsar.timeline, which
sees them as `set` events), nor the spans of `collapsar trace`
(collapsar.tracing).
"""
