"""Agent integrations: what ``init`` / ``remove`` / ``service`` write, and checking what is installed."""

from memmy.integrations.check import Finding as Finding
from memmy.integrations.check import check_installed as check_installed
