"""Rows as users keep them: text parsing and conversion, the HDF5 dataset format, its reader and query
stream, opening data files, atomic writes."""
