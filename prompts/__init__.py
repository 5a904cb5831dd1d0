"""Prompt templates as data (one file per task) and their renderer."""

from curator.prompts.render import PromptError, render, template_names, template_text

__all__ = ["PromptError", "render", "template_names", "template_text"]
