"""A repository's life: APT and DNF indexes, prune, promote, retention, publish."""
