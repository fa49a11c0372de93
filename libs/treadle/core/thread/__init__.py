"""The thread, its messages, its queue and the dispatch modes."""
