"""Plans and todo lists, and implementing a plan."""
