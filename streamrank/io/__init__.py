"""Input and output of data: text parsing, conversion, the HDF5 dataset format, its reader and query stream, the synthetic generator, atomic writes."""
