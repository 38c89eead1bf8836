"""``python -m memmy.agent`` runs the ``memmy`` command line (what the login service of ``memmy serve`` runs)."""

from memmy.agent.cli import main

if __name__ == "__main__":
    main()
