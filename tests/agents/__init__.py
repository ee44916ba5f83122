"""Agent tests: agents built, trained and evaluated in-process on toy data."""
