"""A table-reservation agent, laid out as ADK's docs lay one out: a package whose agent.py holds
`root_agent` (`adk web` / `adk run table_reservation` from examples/table_reservation).

    lab run l1-goaway --client adk:table_reservation --conversation lines.txt     (from that folder)
"""
from google.adk.agents import Agent

# the restaurant's book for tonight: time -> free tables
FREE_TABLES = {"18:00": 2, "19:00": 0, "19:30": 1, "20:30": 3}
RESERVATIONS: dict[str, dict] = {}


def check_slot(time: str, party_size: int) -> dict:
    """Checks whether a table for the party is free at the given time tonight.

    Args:
        time: the time, as HH:MM, e.g. "19:30"
        party_size: how many people

    Returns:
        dict: whether a table is free, and the nearest free times if not
    """
    free = FREE_TABLES.get(time, 0) > 0 and party_size <= 6
    others = [t for t, n in FREE_TABLES.items() if n > 0 and t != time]
    return {"time": time, "party_size": party_size, "free": free, "other_times": [] if free else others}


def reserve_table(time: str, party_size: int, name: str) -> dict:
    """Reserves a table for the party at the given time tonight.

    Args:
        time: the time, as HH:MM, e.g. "19:30"
        party_size: how many people
        name: the name the reservation is under

    Returns:
        dict: the reservation, or why it could not be made
    """
    key = f"{time}/{name.strip().lower()}"
    if key in RESERVATIONS:            # the same reservation asked twice is the same reservation
        return {"status": "reserved", **RESERVATIONS[key]}
    if FREE_TABLES.get(time, 0) <= 0:
        return {"status": "full", "time": time}
    FREE_TABLES[time] -= 1
    RESERVATIONS[key] = {"time": time, "party_size": party_size, "name": name, "reference": f"T{len(RESERVATIONS) + 1:03d}"}
    return {"status": "reserved", **RESERVATIONS[key]}


root_agent = Agent(
    name="table_reservation",
    model="gemini-2.5-flash-native-audio-preview-12-2025",
    description="Takes table reservations for tonight.",
    instruction=(
        "You take table reservations for tonight at a small restaurant. Always check a slot with "
        "check_slot before reserving it, and reserve with reserve_table only once the guest has given "
        "a time, a party size and a name. Read the reference back to the guest."
    ),
    tools=[check_slot, reserve_table],
)
