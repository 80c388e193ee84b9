"""collapsar.manager owns the per-host emulation manager: finds instances, runs one emulation core each, the sharing loop, metadata over Aeron, the event scheduler and the status API. (Local mode lands with the runtime issue.)
"""
