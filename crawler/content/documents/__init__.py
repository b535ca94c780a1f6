"""Documents: PDF and office files read into text, title and page count, or refused with a reason."""

from crawler.content.documents.kinds import Kind, document_kind, is_document
from crawler.content.documents.limits import DocumentLimits
from crawler.content.documents.reader import Document, read_document

__all__ = ["Document", "DocumentLimits", "Kind", "document_kind", "is_document", "read_document"]
