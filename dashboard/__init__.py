"""collapsar.dashboard owns the web dashboard that watches and controls a running experiment. (Lands with the dashboard issue.)
"""
