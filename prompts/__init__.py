"""Prompt templates as data (one file per task) and their renderer. A data directory's `prompts/` folder holds the
user's own versions (`prompts_for(data_dir)`), which replace the shipped ones of the same name."""

from curator.prompts.overrides import SHIPPED, Prompts, PromptInfo, prompts_for
from curator.prompts.render import PromptError, render, template_names, template_text

__all__ = ["SHIPPED", "PromptError", "PromptInfo", "Prompts", "prompts_for", "render", "template_names",
           "template_text"]
