"""The pure core of Treadle: each concept's model, events, commands, decisions and fold, and the
composed thread state. Stdlib and msgspec only."""
