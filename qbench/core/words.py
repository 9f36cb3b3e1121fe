"""Words the reports share."""


def plural(n, noun):
    """``1 image``, ``14 images``: ``n`` and ``noun``, with an ``s`` unless ``n`` is 1."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
