"""Conversations as data: what the user says and what the model does, independent of any wire protocol.

`semantics` defines what a tool's call means to the world (a side effect or not, the arguments that
form its business key, the words the model and the user use for its action); the rest of the package
(the file format, the engine) builds on it, and the report reads the same definition.
"""
