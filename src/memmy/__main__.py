"""``python -m memmy`` runs the ``memmy-memory`` command line."""

from memmy.cli.main import main

if __name__ == "__main__":
    main()
