"""What every zkcoord process has, whatever its role: settings from the environment, the journal it writes, how it
stops within a deadline (:mod:`~zkcoord.runtime.shutdown`, :mod:`~zkcoord.runtime.stopping`), and the fault points a
scenario arms in it.  Imports only :mod:`zkcoord.errors`.
"""
