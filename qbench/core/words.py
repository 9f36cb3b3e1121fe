"""Words the reports share."""


def first_line(error):
    """The first line of an exception's message, or its type's name when it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def plural(n, noun):
    """``1 image``, ``14 images``: ``n`` and ``noun``, with an ``s`` unless ``n`` is 1."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
