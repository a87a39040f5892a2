"""The text of the load generator's requests: chat prompts that no prefix cache can share.

Each prompt opens with a random ticket tag, so a server's prefix (radix) cache cannot
serve one request from another, followed by one of a few everyday questions; a
workload's ``prompt_tokens`` pads it with filler words to about that many tokens.
"""

from __future__ import annotations

import numpy as np

from tuner.trace import CHARS_PER_TOKEN

_QUESTIONS = (
    "Explain how a hash map handles collisions, with a short example.",
    "Write a haiku about autumn rain in a mountain village.",
    "What are the main causes of inflation? Give three and explain each briefly.",
    "Summarize the plot of a heist movie you invent, in one paragraph.",
    "How does TCP congestion control work? Keep it practical.",
    "Give me a recipe for a vegetarian dinner for four people.",
    "Compare Python and Rust for writing a command-line tool.",
    "Describe the water cycle to a ten-year-old.",
    "What should I check before buying a used car?",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain the difference between a process and a thread.",
    "Plan a three-day trip to Lisbon on a modest budget.",
    "Why is the sky blue? Include the physics.",
    "Draft a polite email asking a colleague to review a design document.",
    "What is gradient descent and why does the learning rate matter?",
    "List the pros and cons of remote work for a small startup.",
)
# fmt: off
_FILLER = ("context", "system", "detail", "report", "answer", "section", "careful", "example", "review",
           "summary", "result", "measure", "process", "request", "design", "number", "simple", "market")
# fmt: on


def chat_prompt(rng: np.random.Generator, index: int, prompt_tokens: int | None) -> str:
    """A chat prompt whose first words differ per request, so a prefix cache cannot
    serve one request from another; ``prompt_tokens`` sets an approximate length."""
    tag = f"Ticket {int(rng.integers(1 << 40)):010x}-{index}."
    question = _QUESTIONS[int(rng.integers(len(_QUESTIONS)))]
    if prompt_tokens is None:
        return f"{tag} {question}"
    target_chars = prompt_tokens * CHARS_PER_TOKEN
    words = [tag, question, "Background notes:"]
    size = sum(len(w) + 1 for w in words)
    picks = rng.integers(len(_FILLER), size=max(1, target_chars // 6))
    i = 0
    while size < target_chars:
        w = _FILLER[int(picks[i % len(picks)])]
        words.append(w)
        size += len(w) + 1
        i += 1
    return " ".join(words)
