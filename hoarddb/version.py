"""The version of hoardDB, in a module of its own so that any layer can name it without importing the whole package."""

__version__ = "0.1.0"
