"""Maintenance: consolidation, hierarchical compression, summaries, forgetting, reflection and evolution.
They keep the graph small and true as the story grows; each step is its own commit (origin `maintenance`)."""

from curator.maintenance.common import MaintenanceReport
from curator.maintenance.runner import Maintainer

__all__ = ["Maintainer", "MaintenanceReport"]
