"""What rocpkg owns in OUT: its files opened as hostile, the lock and staging area, the state
journal, the intent journal, manifest.json and its schema, the digest cache, the index entries."""
