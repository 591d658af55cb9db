"""The checks no packager makes: over a plan or a built OUT read back, and OUT's integrity."""
