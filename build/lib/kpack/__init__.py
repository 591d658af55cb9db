"""The kpack archive format, GPU target IDs and device-code detection."""
