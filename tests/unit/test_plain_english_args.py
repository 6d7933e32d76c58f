"""Arguments from plain English (lab/conversation/lines.py): a line's place, person or free noun fills
a string argument named like it, without quotes, and `args_from` says which words did; an argument
the line does not give is "default", and the report lists it (lab/report/arguments.py)."""
import pytest

from lab.conversation import lines as L
from lab.events import Event
from lab.report.arguments import defaulted_args, describe


def _tool(name, props, required=None, description=""):
    decl = {"name": name, "description": description,
            "parameters": {"type": "OBJECT", "properties": props, "required": required or list(props)}}
    return L.tools_from_declarations([decl])[0][name]


def _fill(tool, line):
    calls, why = L.fill(tool, line, {a.name: a.value for a in tool.args if a.value is not None})
    return calls[0], why


WEATHER = _tool("get_weather", {"location": {"type": "STRING"}}, description="Retrieves the weather for a city.")


@pytest.mark.parametrize("line, want", [
    ("What's the weather in Paris?", "Paris"),
    ("And what about London?", "London"),
    ("How hot is it in San Francisco tomorrow?", "San Francisco"),
    ("weather in new york please", "New York"),
    ("Is it cold in \"Rio de Janeiro\"?", "Rio de Janeiro"),
])
def test_a_place_in_the_line_fills_location(line, want):
    args, why = _fill(WEATHER, line)
    assert args == {"location": want} and why["location"] == f"place {want!r} from the line"


@pytest.mark.parametrize("line", ["Is it raining?", "What's the weather like in the morning?",
                                  "Is my booking in progress?"])
def test_no_place_in_the_line_is_a_default_not_a_guess(line):
    args, why = _fill(WEATHER, line)
    assert args == {"location": "location not given"} and why["location"] == L.DEFAULTED


def test_city_destination_and_a_person_and_a_product_by_their_names():
    assert _fill(_tool("get_forecast", {"city": {"type": "STRING"}}), "Forecast for Berlin please")[0] == {"city": "Berlin"}
    flight = _tool("search_flights", {"destination": {"type": "STRING"}})
    assert _fill(flight, "Find me flights to Rome")[0] == {"destination": "Rome"}
    msg = _tool("send_message", {"recipient": {"type": "STRING"}, "text": {"type": "STRING"}})
    args, why = _fill(msg, "Send a message to Bob Smith, say I'm running late.")
    assert args["recipient"] == "Bob Smith" and why["recipient"] == "person 'Bob Smith' from the line"
    price = _tool("get_price", {"product": {"type": "STRING"}})
    assert _fill(price, "What's the price of the blue kettle?")[0] == {"product": "blue kettle"}
    search = _tool("search_catalog", {"query": {"type": "STRING"}})
    assert _fill(search, "Search for running shoes please")[0] == {"query": "running shoes"}


def test_a_guests_name_is_a_person_and_the_party_size_stays_a_number():
    table = _tool("reserve_table", {"time": {"type": "STRING"}, "party_size": {"type": "INTEGER"},
                                    "guest_name": {"type": "STRING"}})
    args, _ = _fill(table, "Reserve a table for 4 at 7pm under Alice")
    assert args == {"time": "7pm", "party_size": 4, "guest_name": "Alice"}


def test_an_identifier_is_not_read_as_a_place():
    order = _tool("track_order", {"order_id": {"type": "STRING"}})
    assert _fill(order, "Where is order A1001 in Berlin?")[0] == {"order_id": "A1001"}


def _model(ms, tool, args, why, text):
    return Event("twin.model", 0.0, float(ms), "twin", {"tool": tool, "args": args, "text": text,
                                                        "match": {"intent": "CALL", "args_from": why}})


def test_the_report_lists_each_defaulted_argument_once_per_line():
    twin = [_model(100, "get_weather", {"location": "location not given"}, {"location": "default"}, "Is it raining?"),
            _model(200, "get_weather", {"location": "location not given"}, {"location": "default"}, "Is it raining?"),
            _model(300, "get_weather", {"location": "Paris"}, {"location": "place 'Paris' from the line"}, "In Paris?"),
            Event("twin.model", 0.0, 400.0, "twin", {"tool": None, "text": "hello", "match": {}})]
    rows = defaulted_args(twin)
    assert [(r["tool"], r["arg"], r["value"]) for r in rows] == [("get_weather", "location", "location not given")]
    assert describe(rows) == ["get_weather(location='location not given'): the line \"Is it raining?\" did not "
                              "give it (defaulted)"]
    assert defaulted_args(None) == []
