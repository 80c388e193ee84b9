"""collapsar.report (`collapsar report`): a run's results as one page.

  figures.py  every figure of a run, as data, from its run directory
              (series, event log, flow table, workload records and spans,
              the experiment as run and what produced it)
  aggregate.py  the figures of repeated runs: mean, spread, 95% interval
  sets.py     a set directory (`collapsar run --repeat/--sweep`) as figures
              per swept value, and the table the set prints
  page.py     those figures as one self-contained HTML file that draws them
              with the dashboard's bundled libraries and requests nothing

It reads run directories through collapsar.runfiles (nothing an instance
planted there is followed) and `collapsar trace`'s breakdown
(collapsar.tracing); the page's script is built with the dashboard
(dashboard/web/src/report.js), which the CLI hands to `page.render`.
"""
