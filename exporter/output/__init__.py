"""The export's result: `ExportOutput`, saving (atomic files, external data)."""
