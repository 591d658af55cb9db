"""Writing a plan's packages into OUT: workers, schedule, the checks that gate publication,
fingerprints, the version-order check."""
