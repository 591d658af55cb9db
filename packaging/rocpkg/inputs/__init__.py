"""What a release is made from, read once: package.json, the artifacts catalog and its facts,
the search of host ELFs for device code, RUNPATH facts, channels, sample artifacts, GPU detection."""
