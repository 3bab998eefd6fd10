"""attnwh.sql: the DuckDB warehouse (schema migrations, connections) and the named queries."""
