"""Parse: a fetched page's links, title and configured fields."""

from crawler.parse.extract import Extracted, Fields, compile_fields, extract

__all__ = ["Extracted", "Fields", "compile_fields", "extract"]
