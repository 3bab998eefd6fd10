"""attnwh.ingest: run encoders over datasets and write attention statistics to the warehouse.

This is the only part of attnwh that imports torch, transformers or datasets; its
submodules import them at module level, so this package itself stays import-light and the
command line loads them only for the commands that run a model.
"""
