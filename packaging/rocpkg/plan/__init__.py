"""The one plan of a release: every package of every format, its files and relations."""
