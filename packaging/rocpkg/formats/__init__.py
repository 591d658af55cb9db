"""How packages are laid out on disk: the .deb and .rpm writers and readers, their streams,
compression, file lists, rendering, signatures and version order. Pure functions of a package
spec: nothing here knows ROCm, kpack or the artifacts."""
