"""``python -m zkcoord.analysis RUN_DIR...`` and ``spark-submit zkcoord/analysis/__main__.py RUN_DIR...``.

The same options as ``zkcoord analyze``; under ``spark-submit`` the master comes from ``spark-submit --master``.
"""

from __future__ import annotations

from zkcoord.cli.analyze_cmd import analyze

if __name__ == "__main__":
    analyze(prog_name="zkcoord-analyze")
