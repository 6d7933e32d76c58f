"""Recording: what every run writes down as it happens, twin or live.

`lab.record.frames` writes and reads `frames.jsonl`, the server's frames per connection without
secrets (the replay's source). The event record itself is `lab.events` (one writer for every room).
Nothing here knows how a run is orchestrated; the clients and the twin's replay import it.
"""
