"""A weather agent, laid out as ADK's docs lay one out: a package whose agent.py holds `root_agent`
(`adk web` / `adk run weather_agent` from examples/weather). Its one tool only reads: asking twice
changes nothing anywhere.

    lab run l1-goaway --client adk:weather_agent --conversation lines.txt     (from that folder)
"""
from google.adk.agents import Agent

# today's weather, by city (lower-case name -> report)
WEATHER = {
    "paris": {"city": "Paris", "condition": "sunny", "temperature_c": 24, "humidity_pct": 40},
    "london": {"city": "London", "condition": "light rain", "temperature_c": 16, "humidity_pct": 82},
    "new york": {"city": "New York", "condition": "partly cloudy", "temperature_c": 21, "humidity_pct": 55},
    "tokyo": {"city": "Tokyo", "condition": "humid and overcast", "temperature_c": 28, "humidity_pct": 74},
}


def get_weather(location: str) -> dict:
    """Gets today's weather for a city.

    Args:
        location: the city's name, e.g. "Paris"

    Returns:
        dict: the city's condition, temperature in Celsius and humidity, or that the city is not known
    """
    report = WEATHER.get(" ".join(location.strip().lower().split()))
    if report is None:
        return {"status": "unknown", "location": location,
                "message": f"No weather report for {location!r}.", "known": [r["city"] for r in WEATHER.values()]}
    return {"status": "ok", **report}


root_agent = Agent(
    name="weather_agent",
    model="gemini-2.5-flash-native-audio-preview-12-2025",
    description="Tells the user today's weather in a city.",
    instruction=(
        "You tell the user today's weather. For every city the user asks about, call get_weather with "
        "the city's name and answer from its result; if the city is not known, say so."
    ),
    tools=[get_weather],
)
