"""attnwh.reports: HTML reports built from the warehouse's named queries (polars + Altair)."""
