# Fuzz targets: filled in by tests/fuzz/*.c
