"""The only package that holds SQL strings and database connections."""
