"""Network buffers: data types, buffers, builders and pools."""
