"""livelab: a network fault-injection lab for realtime Live API clients."""
__version__ = "0.1.0"
