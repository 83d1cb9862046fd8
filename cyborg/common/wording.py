"""Lists in messages: a refusal or a log line names the first few of
many things, then says how many more there are."""

# Things one message names at most, by default.
NAMED = 5


def some(items, named=NAMED):
    """The first ``named`` of ``items`` (strings), joined by commas, then
    "and N more" where there are more."""
    items = list(items)
    shown = ', '.join(items[:named])
    if len(items) > named:
        shown += f' and {len(items) - named} more'
    return shown
