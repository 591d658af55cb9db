"""What rocpkg owns in OUT: its files opened as hostile, the lock and staging area, the state
journal, the journal of a change of OUT and its recovery, the records `repo` indexes from,
manifest.json and its schema, the index entries."""
