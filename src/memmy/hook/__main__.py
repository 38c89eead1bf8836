"""``python -m memmy.hook <agent> <event>``: read the host's stdin JSON, talk to the daemon, fail open."""

import sys

from memmy.hook.runtime import main

main(sys.argv)
