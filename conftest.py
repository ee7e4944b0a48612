"""Repo-level defaults only. The sbxcheck plugin is registered by its pytest11 entry point."""
