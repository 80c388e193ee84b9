"""collapsar (folder collapsar/): Collapsar's core, the experiment language and its math.

Owns the topology model (`model`), units (`units`), the YAML parser and its
validation (`parser`; the `workload:` form of a service in `parse_workload`
and `wl_values`), the Kollaps XML importer (`kollaps_xml`), collapsing the
topology into end-to-end paths (`collapse`), the precomputed timeline
(`timeline`; links that follow a trace file compile into it in
`linktraces`), host resources per instance and the modes that honour them
(`resources`; the CPU speed's quota in `cpuspeed`), the analysis of a run's
workload spans (`tracing`, behind `collapsar trace`) and the `collapsar`
command line (`cli`).

It does not touch the kernel, start processes or talk to Docker: those belong
to `collapsar.tcal`, `collapsar.manager` and `collapsar.deploy`, which all
read the same model from here.  One exception: validating a wl-client or
wl-node command runs that program's parse-only `--check` (`chaincheck`), so
that chains have one grammar, the C one.
"""

__version__ = "0.1.0"
