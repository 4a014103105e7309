"""The HTTP edge: decode, call one runtime/db function, encode."""
